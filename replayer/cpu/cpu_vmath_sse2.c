/* cpu_vmath_sse2.c — cpu_vmath_kern.h's rows for the build's own ISA: SSE2,
 * the x86-64 baseline (elsewhere, e.g. arm64, the only build). */
#define VM_SUFFIX _base
#include "cpu_vmath_kern.h"
