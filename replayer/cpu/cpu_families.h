/* cpu_families.h — the CPU backend's op families beyond the core file.
 *
 * Each family file (cpu_pointwise.c, cpu_reduce2.c, cpu_dense.c, cpu_index.c,
 * cpu_amp.c)
 * defines one `owns` predicate (true for exactly the ops it executes) and one
 * `exec` with a switch over those ops. rgpu_cpu_exec/supports consult them in
 * order, so adding an op to a family touches only that family's file. */
#ifndef RGPU_CPU_FAMILIES_H
#define RGPU_CPU_FAMILIES_H

#include "backend.h"

typedef struct cpu_family {
    const char *name;
    bool (*owns)(int op);
    rgpu_status (*exec)(const rgpu_exec *e, char *err, size_t errlen);
} cpu_family;

/* pointwise: unary, binary, ternary, activation backwards, tril/triu */
bool cpu_pointwise_owns(int op);
rgpu_status cpu_pointwise_exec(const rgpu_exec *e, char *err, size_t errlen);
/* reductions beyond sum/mean, softmax family, layer norm, nll loss */
bool cpu_reduce2_owns(int op);
rgpu_status cpu_reduce2_exec(const rgpu_exec *e, char *err, size_t errlen);
/* matmul (OpenBLAS), convolution, batch norm, pooling */
bool cpu_dense_owns(int op);
rgpu_status cpu_dense_exec(const rgpu_exec *e, char *err, size_t errlen);
/* embedding, gather/scatter, index ops, cat, pad, random, dropout, nonzero, unique */
bool cpu_index_owns(int op);
rgpu_status cpu_index_exec(const rgpu_exec *e, char *err, size_t errlen);
/* mixed precision: GradScaler's unscale + inf check, scale update */
bool cpu_amp_owns(int op);
rgpu_status cpu_amp_exec(const rgpu_exec *e, char *err, size_t errlen);

#endif
