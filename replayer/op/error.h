/* op/error.h — the one error-reporting idiom of the replayer's op code
 * (zstd's lib/common/error_private.h is the model).
 *
 * A function that can fail returns an rgpu_status and takes (char *err,
 * size_t errlen); on failure it writes ONE line naming the op and the
 * problem into err (truncated to errlen; err may be NULL) and returns the
 * status. The macros below assume those two parameters are in scope:
 *
 *   RETURN_ERROR_IF(x->ndim != 2, RGPU_ERR_SHAPE, "%s: x must be 2-d", name);
 *   RETURN_ERROR(RGPU_ERR_UNSUPPORTED, "%s: no %s kernel", name, dt);
 *   FORWARD_IF_ERROR(rgpu_op_check_view(v, "in[0]", op, err, errlen));
 *
 * Plain C that C++ (nvcc, cudaemu) also compiles: the CPU and CUDA backends
 * use the same macros. Nothing here aborts. */
#ifndef RGPU_OP_ERROR_H
#define RGPU_OP_ERROR_H

#include <stddef.h>

#include "backend.h"

#ifdef __cplusplus
extern "C" {
#endif

/* vsnprintf into err (no-op when err is NULL or errlen is 0). */
void rgpu_op_errf(char *err, size_t errlen, const char *fmt, ...) __attribute__((format(printf, 3, 4)));
/* The same, returning st: the one helper of code outside op/ that reports an
 * error as (status, one line) -- the session, the server loop, the self-check. */
rgpu_status rgpu_op_fail(char *err, size_t errlen, rgpu_status st, const char *fmt, ...)
    __attribute__((format(printf, 4, 5)));

#ifdef __cplusplus
}
#endif

/* Writes the message and returns status. */
#define RETURN_ERROR(status, ...) \
    do { rgpu_op_errf(err, errlen, __VA_ARGS__); return (status); } while (0)

/* When cond holds: writes the message and returns status. */
#define RETURN_ERROR_IF(cond, status, ...) \
    do { if (cond) { rgpu_op_errf(err, errlen, __VA_ARGS__); return (status); } } while (0)

/* Returns expr's status when it is not RGPU_OK (its message is already in err). */
#define FORWARD_IF_ERROR(expr) \
    do { rgpu_status fwd_st_ = (expr); if (fwd_st_ != RGPU_OK) return fwd_st_; } while (0)

#endif
