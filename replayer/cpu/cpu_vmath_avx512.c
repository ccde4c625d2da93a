/* cpu_vmath_avx512.c — cpu_vmath_kern.h's rows built for AVX-512F (x86-64
 * only; cpu_vmath.c calls them where the CPU has AVX-512F). */
#if defined(__x86_64__)
#define VM_TARGET __attribute__((target("avx512f")))
#define VM_SUFFIX _avx512
#define VM_AVX512 1
#include "cpu_vmath_kern.h"
#else
typedef int rgpu_vmath_avx512_none;   /* ISO C wants a declaration */
#endif
