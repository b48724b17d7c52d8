/* XXH3 kernels compiled for avx512; used only where the CPU reports it. */
#include <stddef.h>
#include <stdint.h>
#include <string.h>

#include "cp_simd.h"

#if defined(__x86_64__) && (defined(__GNUC__) || defined(__clang__))
#if defined(__clang__)
#pragma clang attribute push(__attribute__((target("avx512f"))), apply_to = function)
#else
#pragma GCC target("avx512f")
#endif
#define XXH_INLINE_ALL
#define XXH_VECTOR XXH_AVX512
#include <xxhash.h>
#define CP_ISA avx512
#define CP_ISA_NAME "avx512"
#include "cp_kernels.inc"
#if defined(__clang__)
#pragma clang attribute pop
#endif
#else
/* Not x86-64: the table exists but is never selected (cp_cpu_has() is 0). */
const cp_kernels cp_kernels_avx512 = {"avx512", 0, 0, 0};
#endif
