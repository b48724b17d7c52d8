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

/* Length of the chunk that starts at p, with left > min_size bytes left. */
static size_t cut_one(const uint8_t *p, size_t min_size, size_t normal, size_t limit,
                      uint64_t mask_s, uint64_t mask_l)
{
    uint64_t h = 0;
    size_t i = min_size;
    for (; i < normal; i++) {
        h = (h << 1) + CP_GEAR[p[i]];
        if (!(h & mask_s))
            return i + 1;
    }
    for (; i < limit; i++) {
        h = (h << 1) + CP_GEAR[p[i]];
        if (!(h & mask_l))
            return i + 1;
    }
    return limit;
}

int cp_chunk_cuts(const uint8_t *data, size_t len, uint32_t min_size, uint32_t avg_size,
                  uint32_t max_size, uint64_t *cuts, size_t cap, size_t *count)
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
        start += cut;
        cuts[n++] = (uint64_t)start;
    }
    *count = n;
    return CP_OK;
}
