/*
 * Content-defined chunking (FastCDC-style gear hash, normalized chunking
 * level 2). The algorithm, the parameters and the gear table are specified
 * by cpstore/native/chunking.py (cut_points), which this file must agree
 * with byte for byte; docs/format.md, "Content-defined chunks", documents it.
 */
#include "cpstore.h"

#include "cp_gear.inc"

#define CP_CHUNK_LIMIT (1u << 30)

static int chunk_params_ok(uint32_t min_size, uint32_t avg_size, uint32_t max_size)
{
    if (min_size < 1 || min_size > avg_size || avg_size > max_size || max_size > CP_CHUNK_LIMIT)
        return 0;
    return avg_size >= 64 && (avg_size & (avg_size - 1)) == 0;
}

static unsigned log2_u32(uint32_t v)
{
    unsigned bits = 0;
    while (v > 1) {
        v >>= 1;
        bits++;
    }
    return bits;
}

/* Scan positions [*at, end) of the chunk at p with the gear hash *hash (the hash
 * before position *at); on the first position i where the hash & mask == 0,
 * set *at = i + 1 and return 1, else leave *at = end, *hash updated, return 0.
 *
 * Eight positions per step: h_{i+k} = (h << (k+1)) + t_k with t_0 = g_0 and
 * t_k = (t_{k-1} << 1) + g_k (all mod 2**64), which is the byte-at-a-time
 * recurrence h = (h << 1) + GEAR[byte] unrolled. The t_k depend on the data
 * only, so the loop-carried dependency is one shift and one add per eight
 * bytes instead of per byte; the tests still run in position order, so the
 * first hit is the same cut (tests/test_native_chunker.py pins every lane). */
static inline int gear_scan(const uint8_t *p, size_t *at, size_t end, uint64_t *hash,
                            uint64_t mask)
{
    uint64_t h = *hash;
    size_t i = *at;
    while (end - i >= 8) {
        const uint8_t *q = p + i;
        uint64_t g0 = CP_GEAR[q[0]], g1 = CP_GEAR[q[1]], g2 = CP_GEAR[q[2]], g3 = CP_GEAR[q[3]];
        uint64_t g4 = CP_GEAR[q[4]], g5 = CP_GEAR[q[5]], g6 = CP_GEAR[q[6]], g7 = CP_GEAR[q[7]];
        uint64_t t1 = (g0 << 1) + g1, t2 = (t1 << 1) + g2, t3 = (t2 << 1) + g3;
        uint64_t u1 = (g4 << 1) + g5, u2 = (u1 << 1) + g6, u3 = (u2 << 1) + g7;
        uint64_t h0 = (h << 1) + g0, h1 = (h << 2) + t1, h2 = (h << 3) + t2;
        uint64_t h3 = (h << 4) + t3;
        uint64_t h4 = (h3 << 1) + g4, h5 = (h3 << 2) + u1, h6 = (h3 << 3) + u2;
        uint64_t h7 = (h3 << 4) + u3;
        if (!(h0 & mask)) { *at = i + 1; return 1; }
        if (!(h1 & mask)) { *at = i + 2; return 1; }
        if (!(h2 & mask)) { *at = i + 3; return 1; }
        if (!(h3 & mask)) { *at = i + 4; return 1; }
        if (!(h4 & mask)) { *at = i + 5; return 1; }
        if (!(h5 & mask)) { *at = i + 6; return 1; }
        if (!(h6 & mask)) { *at = i + 7; return 1; }
        if (!(h7 & mask)) { *at = i + 8; return 1; }
        h = h7;
        i += 8;
    }
    for (; i < end; i++) {
        h = (h << 1) + CP_GEAR[p[i]];
        if (!(h & mask)) {
            *at = i + 1;
            return 1;
        }
    }
    *at = i;
    *hash = h;
    return 0;
}

/* Length of the chunk that starts at p, with left > min_size bytes left. */
static size_t cut_one(const uint8_t *p, size_t min_size, size_t normal, size_t limit,
                      uint64_t mask_s, uint64_t mask_l)
{
    uint64_t h = 0;
    size_t i = min_size;
    if (i < normal && gear_scan(p, &i, normal, &h, mask_s))
        return i;
    if (i < limit && gear_scan(p, &i, limit, &h, mask_l))
        return i;
    return limit;
}

/* The chunk loop of cp_chunk_cuts and cp_chunk_digests: with digests != NULL,
 * each chunk is hashed (cp_digest_batch, one item) right after it is cut,
 * while its bytes are still in cache, instead of in a second pass over data. */
static int chunk_loop(const uint8_t *data, size_t len, uint32_t min_size, uint32_t avg_size,
                      uint32_t max_size, uint64_t *cuts, uint8_t *digests, size_t cap,
                      size_t *count)
{
    if (count == NULL || (data == NULL && len != 0) || (cuts == NULL && cap != 0))
        return CP_ERR_NULL;
    *count = 0;
    if (!chunk_params_ok(min_size, avg_size, max_size))
        return CP_ERR_CHUNK_PARAMS;
    unsigned bits = log2_u32(avg_size);
    uint64_t mask_s = ~(uint64_t)0 << (64 - bits - 2);
    uint64_t mask_l = ~(uint64_t)0 << (64 - bits + 2);
    size_t start = 0, n = 0;
    while (start < len) {
        size_t left = len - start, cut;
        if (left <= min_size) {
            cut = left;
        } else {
            size_t limit = left < max_size ? left : max_size;
            size_t normal = avg_size < limit ? avg_size : limit;
            cut = cut_one(data + start, min_size, normal, limit, mask_s, mask_l);
        }
        if (n == cap) {
            *count = n;
            return CP_ERR_CHUNK_SPACE;
        }
        if (digests != NULL) {
            const uint64_t item[2] = {(uint64_t)start, (uint64_t)(start + cut)};
            int rc = cp_digest_batch(data, len, item, 1, digests + 16 * n);
            if (rc != CP_OK) {
                *count = n;
                return rc;
            }
        }
        start += cut;
        cuts[n++] = (uint64_t)start;
    }
    *count = n;
    return CP_OK;
}

int cp_chunk_cuts(const uint8_t *data, size_t len, uint32_t min_size, uint32_t avg_size,
                  uint32_t max_size, uint64_t *cuts, size_t cap, size_t *count)
{
    return chunk_loop(data, len, min_size, avg_size, max_size, cuts, NULL, cap, count);
}

int cp_chunk_digests(const uint8_t *data, size_t len, uint32_t min_size, uint32_t avg_size,
                     uint32_t max_size, uint64_t *cuts, uint8_t *digests, size_t cap,
                     size_t *count)
{
    if (digests == NULL && cap != 0) {
        if (count != NULL)
            *count = 0;
        return CP_ERR_NULL;
    }
    return chunk_loop(data, len, min_size, avg_size, max_size, cuts, digests, cap, count);
}
