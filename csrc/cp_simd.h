/*
 * Internal to the C core (build.py does not read it): the per-ISA XXH3
 * kernels. Each cp_xxh_<isa>.c compiles xxhash.h inline for one instruction
 * set through per-function target attributes, so a wheel built for the
 * x86-64 baseline still runs the AVX2/AVX-512 kernels where the CPU has them.
 */
#ifndef CP_SIMD_H
#define CP_SIMD_H

#include <stddef.h>
#include <stdint.h>

/* States are XXH3_state_t; void * because XXH_INLINE_ALL renames the type. */
typedef struct {
    const char *name;
    void (*hash128)(const uint8_t *data, size_t len, uint8_t *out);
    void (*update)(void *state, const uint8_t *data, size_t len);
    void (*digest)(const void *state, uint8_t *out);
} cp_kernels;

extern const cp_kernels cp_kernels_avx2;
extern const cp_kernels cp_kernels_avx512;

#endif
