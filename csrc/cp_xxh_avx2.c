/* XXH3 kernels compiled for avx2; used only where the CPU reports it. */
#include <stddef.h>
#include <stdint.h>
#include <string.h>

#include "cp_simd.h"

#if defined(__x86_64__) && (defined(__GNUC__) || defined(__clang__))
#if defined(__clang__)
#pragma clang attribute push(__attribute__((target("avx2"))), apply_to = function)
#else
#pragma GCC target("avx2")
#endif
#define XXH_INLINE_ALL
#define XXH_VECTOR XXH_AVX2
#include <xxhash.h>
#define CP_ISA avx2
#define CP_ISA_NAME "avx2"
#include "cp_kernels.inc"
#if defined(__clang__)
#pragma clang attribute pop
#endif
#else
/* Not x86-64: the table exists but is never selected (cp_cpu_has() is 0). */
const cp_kernels cp_kernels_avx2 = {"avx2", 0, 0, 0};
#endif
