/* cpu_vmath_avx2.c — cpu_vmath_kern.h's rows built for AVX2 (x86-64 only;
 * cpu_vmath.c calls them where the CPU has AVX2). */
#if defined(__x86_64__)
#define VM_TARGET __attribute__((target("avx2")))
#define VM_SUFFIX _avx2
#define VM_AVX2 1
#include "cpu_vmath_kern.h"
#else
typedef int rgpu_vmath_avx2_none;   /* ISO C wants a declaration */
#endif
