/* op_args.h — a record's scalar args against ops.def (backend-neutral).
 *
 * ops.def's ARGS column says, per op, how many scalar args a record carries
 * and which kinds each may have; tools/gen_ops.py turns it into
 * op_gen_args.inc. The session checks every record here once, before any
 * backend sees it, so a kernel may rely on the count and the kinds; what a
 * value means (a dim in range, a mode 1 or 2) stays the family's check. */
#ifndef RGPU_OP_ARGS_H
#define RGPU_OP_ARGS_H

#include "rgpu_format.h"

#ifdef __cplusplus
extern "C" {
#endif

typedef struct op_argspec {
    uint16_t kinds;          /* bit k: an arg of rgpu_arg_kind k is accepted */
    const char *name;        /* ops.def's name for it ("keepdim") */
    const char *want;        /* its kinds as ops.def writes them ("b", "ints|i?") */
} op_argspec;

/* The ARGS of op: *n specs (NULL and 0 for an op number out of range). */
const op_argspec *rgpu_op_argspecs(int op, int *n);

/* Check an op's arity (n_in, n_out as ops.def says, VARIADIC: n_in at least
 * N_IN and at most RGPU_MAX_IN), its arg count (exactly the ARGS) and each
 * arg's kind. RGPU_ERR_BAD_OP, RGPU_ERR_ARITY or RGPU_ERR_BAD_ARG with a
 * one-line reason in why ("sum.dim_IntList: arg 1 (keepdim) is a float, want
 * b"). */
rgpu_status rgpu_op_args_check(int op, int n_in, int n_out, int n_args, const rgpu_arg *args, char *why,
                               size_t whylen);

#ifdef __cplusplus
}
#endif
#endif
