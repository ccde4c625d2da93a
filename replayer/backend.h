/* backend.h — what an executor backend (cpu, cuda, null) provides.
 *
 * The session layer (replayer/session.c) owns storages and tensors and turns
 * each decoded record into one exec call on resolved views. A backend only
 * sees device pointers with dtype/sizes/strides; it never parses records.
 * Dispatch inside exec is one switch whose default returns UNSUPPORTED. */
#ifndef RGPU_BACKEND_H
#define RGPU_BACKEND_H

#include "rgpu_format.h"

#ifdef __cplusplus
extern "C" {
#endif

/* A tensor as the kernel sees it. data already includes the storage offset. */
typedef struct rgpu_view {
    void *data;
    int dtype;
    int ndim;
    int64_t sizes[RGPU_MAX_DIMS];
    int64_t strides[RGPU_MAX_DIMS];   /* elements */
} rgpu_view;

/* One op invocation with everything resolved. Inputs may be NULL for an
 * absent optional tensor. args point into the record. */
typedef struct rgpu_exec {
    int op;
    int n_in, n_out, n_args;
    const rgpu_view *in[RGPU_MAX_IN];
    rgpu_view *out[RGPU_MAX_OUT];
    const rgpu_arg *args;
} rgpu_exec;

typedef struct rgpu_backend rgpu_backend;
struct rgpu_backend {
    const char *name;
    void *ctx;
    /* Device memory. alloc returns NULL when out of memory. nbytes may be 0
     * (return a valid, unique, non-NULL pointer). */
    void *(*alloc)(rgpu_backend *b, size_t nbytes);
    void (*free)(rgpu_backend *b, void *p);
    /* Host <-> device bytes (contiguous). */
    rgpu_status (*upload)(rgpu_backend *b, void *dst, const void *src, size_t n);
    rgpu_status (*download)(rgpu_backend *b, void *dst, const void *src, size_t n);
    /* Run one op. On failure write a one-line reason into err. */
    rgpu_status (*exec)(rgpu_backend *b, const rgpu_exec *e, char *err, size_t errlen);
    rgpu_status (*sync)(rgpu_backend *b);
    /* True when exec can run op (over any dtype it accepts). */
    bool (*supports)(rgpu_backend *b, int op);
    void (*destroy)(rgpu_backend *b);
};

/* By name: cpu, cuda, null or auto (cuda when usable, else cpu). why gets a
 * one-line note (auto's choice) or, on NULL, the reason. */
rgpu_backend *rgpu_backend_create(const char *name, char *why, size_t whylen);
rgpu_backend *rgpu_backend_cpu_create(void);
/* Test-only: cpu, but every result of op fault_op is one ulp off (first
 * element of each floating output). */
rgpu_backend *rgpu_backend_cpu_create_faulty(int fault_op);
/* Decodes nothing, computes nothing: outputs are zero-filled on alloc. */
rgpu_backend *rgpu_backend_null_create(void);
/* NULL when the CUDA backend is not built or no device is usable; *why says which. */
rgpu_backend *rgpu_backend_cuda_create(char *why, size_t whylen);

/* ---------------------------------------------------------------------------
 * CPU kernel entry point (replayer/cpu/): executes e on host memory. */
rgpu_status rgpu_cpu_exec(const rgpu_exec *e, char *err, size_t errlen);
bool rgpu_cpu_supports(int op);

#ifdef __cplusplus
}
#endif
#endif
