/* cudaemu_api.h — what the layer offers beyond the CUDA runtime API: for the
 * cuBLAS reference (libcublas.so.13 of cudaemu) and the layer's own tests. */
#pragma once
#include <cuda_runtime_api.h>
#include <stddef.h>

#ifdef __cplusplus
extern "C" {
#endif

/* Queue fn(arg) on stream s (or into its capture); release(arg) when the
 * operation (and every graph holding it) is gone. Returns a cudaError_t. */
int cudaemu_enqueue_host(cudaStream_t s, const char *what, void (*fn)(void *), void *arg, void (*release)(void *));
/* 1 when [p, p+n) lies inside one live device allocation. */
int cudaemu_device_range_ok(const void *p, size_t n);
/* Make msg the sticky fault (printed, cudaErrorLaunchFailure from then on). */
void cudaemu_report_fault(const char *msg);
/* The first fault's message ("" when none). */
const char *cudaemu_last_fault(void);
/* Kernels executed so far; operations queued on s and not yet run. */
unsigned long long cudaemu_kernels_run(void);
size_t cudaemu_pending(cudaStream_t s);
/* Tests only: clear the sticky fault and re-read CUDAEMU_ORDER. */
void cudaemu_reset_for_tests(void);

#ifdef __cplusplus
}
#endif
