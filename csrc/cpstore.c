/*
 * cpstore native core. See cpstore.h for the contract of every function and
 * docs/format.md for the record layouts; cpstore/native/reference.py is the
 * executable spec this file must agree with byte for byte.
 */
#include <string.h>

#include "cpstore.h"
#include "cp_simd.h"

#define XXH_INLINE_ALL
#include <xxhash.h>

#if defined(__GNUC__) || defined(__clang__)
#define CP_UNLIKELY(x) __builtin_expect(!!(x), 0)
#else
#define CP_UNLIKELY(x) (x)
#endif

/* ---- record layouts (must match cpstore/native/records.py) ------------------ */

typedef struct {
    uint32_t offset;
    uint32_t size;
} cp_field;

typedef struct {
    size_t size;
    uint32_t nfields;
    cp_field fields[8];
} cp_layout;

static const cp_layout LAYOUTS[] = {
    {0, 0, {{0, 0}}},
    /* TOKEN: seq, kind, provenance, value, reserved */
    {32, 5, {{0, 8}, {8, 4}, {12, 1}, {16, 16}, {13, 3}}},
    /* OBSERVATION: step, pinned_at, flags, source, payload, reserved */
    {56, 6, {{0, 8}, {8, 8}, {16, 4}, {24, 16}, {40, 16}, {20, 4}}},
    /* DECISION: step, node, reserved */
    {32, 3, {{0, 8}, {16, 16}, {8, 8}}},
    /* EFFECT: seq, target, payload, reserved */
    {48, 4, {{0, 8}, {16, 16}, {32, 16}, {8, 8}}},
};

#define CP_NTYPES (sizeof(LAYOUTS) / sizeof(LAYOUTS[0]))

static const cp_layout *layout_of(uint32_t record_type)
{
    if (record_type == 0 || record_type >= CP_NTYPES)
        return NULL;
    return &LAYOUTS[record_type];
}

size_t cp_record_size(uint32_t record_type)
{
    const cp_layout *l = layout_of(record_type);
    return l ? l->size : 0;
}

uint32_t cp_record_field_count(uint32_t record_type)
{
    const cp_layout *l = layout_of(record_type);
    return l ? l->nfields : 0;
}

/* Little-endian loads: one unaligned load on little-endian hosts (memcpy is
 * how C spells that without undefined behaviour), a byte loop elsewhere. */
static inline uint64_t load_u64le(const uint8_t *p)
{
#if defined(__BYTE_ORDER__) && __BYTE_ORDER__ == __ORDER_LITTLE_ENDIAN__
    uint64_t v;
    memcpy(&v, p, sizeof(v));
    return v;
#else
    uint64_t v = 0;
    for (int i = 7; i >= 0; i--)
        v = (v << 8) | p[i];
    return v;
#endif
}

static inline uint32_t load_u32le(const uint8_t *p)
{
#if defined(__BYTE_ORDER__) && __BYTE_ORDER__ == __ORDER_LITTLE_ENDIAN__
    uint32_t v;
    memcpy(&v, p, sizeof(v));
    return v;
#else
    return (uint32_t)p[0] | (uint32_t)p[1] << 8 | (uint32_t)p[2] << 16 | (uint32_t)p[3] << 24;
#endif
}

static void store_u64le(uint8_t *p, uint64_t v)
{
    for (int i = 0; i < 8; i++, v >>= 8)
        p[i] = (uint8_t)v;
}

static void store_u32le(uint8_t *p, uint32_t v)
{
    for (int i = 0; i < 4; i++, v >>= 8)
        p[i] = (uint8_t)v;
}

/* ---- kernel dispatch -------------------------------------------------- */

static void hash128_base(const uint8_t *data, size_t len, uint8_t *out)
{
    XXH128_canonicalFromHash((XXH128_canonical_t *)out, XXH3_128bits(data, len));
}

/* Longest input XXH3 hashes without its SIMD accumulate loop (XXH3_MIDSIZE_MAX). */
#define CP_SCALAR_MAX 240u

static void update_base(void *state, const uint8_t *data, size_t len)
{
    (void)XXH3_128bits_update((XXH3_state_t *)state, data, len);
}

static void digest_base(const void *state, uint8_t *out)
{
    XXH128_canonicalFromHash((XXH128_canonical_t *)out,
                             XXH3_128bits_digest((const XXH3_state_t *)state));
}

#if defined(__x86_64__)
#define CP_BASE_NAME "sse2"
#else
#define CP_BASE_NAME "scalar"
#endif

static const cp_kernels KERNELS_BASE = {
    CP_BASE_NAME, hash128_base, update_base, digest_base,
};

static int cpu_has(uint32_t level)
{
#if defined(__x86_64__) && (defined(__GNUC__) || defined(__clang__))
    __builtin_cpu_init();
    if (level == CP_SIMD_AVX2)
        return __builtin_cpu_supports("avx2");
    if (level == CP_SIMD_AVX512)
        return __builtin_cpu_supports("avx512f");
#endif
    return level == CP_SIMD_BASELINE;
}

/* Written once per selection; a race between two first calls writes the
 * same pointer, so no lock is needed. */
static const cp_kernels *volatile active;

static const cp_kernels *kernels(void)
{
    const cp_kernels *k = active;
    if (k == NULL) {
        (void)cp_simd_select(CP_SIMD_AUTO);
        k = active;
    }
    return k;
}

int cp_simd_select(uint32_t level)
{
    if (level == CP_SIMD_AUTO) {
        /* AVX2 before AVX-512: measured no faster here for XXH3, and it
         * avoids the frequency drop some CPUs take on 512-bit work. */
        if (cpu_has(CP_SIMD_AVX2))
            active = &cp_kernels_avx2;
        else
            active = &KERNELS_BASE;
        return CP_OK;
    }
    if (level > CP_SIMD_AVX512 || !cpu_has(level))
        return CP_ERR_UNSUPPORTED;
    active = level == CP_SIMD_AVX2     ? &cp_kernels_avx2
             : level == CP_SIMD_AVX512 ? &cp_kernels_avx512
                                       : &KERNELS_BASE;
    return CP_OK;
}

const char *cp_simd_path(void)
{
    return kernels()->name;
}

/* ---- digests ---------------------------------------------------------- */

int cp_digest(const uint8_t *data, size_t len, uint8_t *out)
{
    if (out == NULL || (data == NULL && len != 0))
        return CP_ERR_NULL;
    kernels()->hash128(data, len, out);
    return CP_OK;
}

int cp_digest_batch(const uint8_t *data, size_t data_len, const uint64_t *offsets, size_t n,
                    uint8_t *out)
{
    if (offsets == NULL || (out == NULL && n != 0) || (data == NULL && data_len != 0))
        return CP_ERR_NULL;
    for (size_t i = 0; i < n; i++)
        if (offsets[i + 1] < offsets[i])
            return CP_ERR_OFFSETS;
    if (offsets[n] > data_len)
        return CP_ERR_OFFSETS;
    if (n != 0 && data == NULL)
        data = (const uint8_t *)""; /* every item is empty */
    /* XXH3 hashes items of up to 240 bytes with scalar code that no SIMD
     * kernel changes; the baseline build of it, inlined here, is about twice
     * as fast on such items as the copy compiled under target("avx2") and
     * saves an indirect call per item. Longer items go to the kernel. */
    const cp_kernels *k = kernels();
    for (size_t i = 0; i < n; i++) {
        size_t len = (size_t)(offsets[i + 1] - offsets[i]);
        if (len <= CP_SCALAR_MAX)
            hash128_base(data + offsets[i], len, out + 16 * i);
        else
            k->hash128(data + offsets[i], len, out + 16 * i);
    }
    return CP_OK;
}

/* ---- sequence digests ------------------------------------------------- */

#define SEQ_MAGIC 0x51535043u /* "CPSQ" little-endian */
#define SEQ_VERSION 1u

typedef struct {
    uint32_t magic;
    uint32_t record_type;
    uint64_t record_size;
    uint64_t bytes;
    uint64_t state_offset; /* where the aligned XXH3 state sits in opaque[] */
} seq_head;

_Static_assert(sizeof(seq_head) + 64 + sizeof(XXH3_state_t) <= sizeof(cp_seq_state),
               "cp_seq_state too small for this xxHash");

static XXH3_state_t *seq_xxh(const cp_seq_state *s)
{
    uintptr_t base = (uintptr_t)s->opaque + sizeof(seq_head);
    uintptr_t aligned = (base + 63) & ~(uintptr_t)63;
    return (XXH3_state_t *)aligned;
}

static int seq_check(const cp_seq_state *s, const seq_head **head)
{
    if (s == NULL)
        return CP_ERR_NULL;
    const seq_head *h = (const seq_head *)(const void *)s->opaque;
    if (h->magic != SEQ_MAGIC || layout_of(h->record_type) == NULL ||
        h->record_size != layout_of(h->record_type)->size ||
        h->state_offset != (uint64_t)((uintptr_t)seq_xxh(s) - (uintptr_t)s->opaque))
        return CP_ERR_STATE;
    *head = h;
    return CP_OK;
}

static void seq_prefix(uint8_t out[16], uint32_t record_type, uint32_t record_size)
{
    memcpy(out, "CPSQ", 4);
    out[4] = (uint8_t)SEQ_VERSION;
    out[5] = (uint8_t)(SEQ_VERSION >> 8);
    out[6] = (uint8_t)record_type;
    out[7] = (uint8_t)(record_type >> 8);
    store_u32le(out + 8, record_size);
    store_u32le(out + 12, 0);
}

int cp_seq_init(cp_seq_state *state, uint32_t record_type)
{
    if (state == NULL)
        return CP_ERR_NULL;
    const cp_layout *l = layout_of(record_type);
    if (l == NULL)
        return CP_ERR_RECORD_TYPE;
    memset(state, 0, sizeof(*state));
    seq_head *h = (seq_head *)(void *)state->opaque;
    XXH3_state_t *x = seq_xxh(state);
    h->magic = SEQ_MAGIC;
    h->record_type = record_type;
    h->record_size = l->size;
    h->bytes = 0;
    h->state_offset = (uint64_t)((uintptr_t)x - (uintptr_t)state->opaque);
    (void)XXH3_128bits_reset(x);
    uint8_t prefix[16];
    seq_prefix(prefix, record_type, (uint32_t)l->size);
    kernels()->update(x, prefix, sizeof(prefix));
    return CP_OK;
}

int cp_seq_update(cp_seq_state *state, const uint8_t *data, size_t len)
{
    const seq_head *hc;
    int rc = seq_check(state, &hc);
    if (rc != CP_OK)
        return rc;
    if (data == NULL && len != 0)
        return CP_ERR_NULL;
    if (len == 0)
        return CP_OK;
    kernels()->update(seq_xxh(state), data, len);
    ((seq_head *)(void *)state->opaque)->bytes += len;
    return CP_OK;
}

int cp_seq_count(const cp_seq_state *state, uint64_t *count)
{
    const seq_head *h;
    int rc = seq_check(state, &h);
    if (rc != CP_OK)
        return rc;
    if (count == NULL)
        return CP_ERR_NULL;
    *count = h->bytes / h->record_size;
    return CP_OK;
}

int cp_seq_final(const cp_seq_state *state, uint8_t *out)
{
    const seq_head *h;
    int rc = seq_check(state, &h);
    if (rc != CP_OK)
        return rc;
    if (out == NULL)
        return CP_ERR_NULL;
    if (h->bytes % h->record_size != 0)
        return CP_ERR_PARTIAL;
    XXH3_state_t copy; /* the type carries its own 64-byte alignment */
    XXH3_copyState(&copy, seq_xxh(state));
    uint8_t trailer[8];
    store_u64le(trailer, h->bytes / h->record_size);
    kernels()->update(&copy, trailer, sizeof(trailer));
    kernels()->digest(&copy, out);
    return CP_OK;
}

int cp_seq_digest(uint32_t record_type, const uint8_t *records, size_t len, uint8_t *out)
{
    const cp_layout *l = layout_of(record_type);
    if (l == NULL)
        return CP_ERR_RECORD_TYPE;
    if (out == NULL || (records == NULL && len != 0))
        return CP_ERR_NULL;
    if (len % l->size != 0)
        return CP_ERR_MISALIGNED;
    cp_seq_state s;
    int rc = cp_seq_init(&s, record_type);
    if (rc == CP_OK)
        rc = cp_seq_update(&s, records, len);
    if (rc == CP_OK)
        rc = cp_seq_final(&s, out);
    return rc;
}

/* ---- comparison ------------------------------------------------------- */

static uint32_t record_diff(const cp_layout *l, uint32_t mask, const uint8_t *a, const uint8_t *b)
{
    uint32_t differ = 0;
    for (uint32_t f = 0; f < l->nfields; f++)
        if ((mask >> f & 1u) &&
            memcmp(a + l->fields[f].offset, b + l->fields[f].offset, l->fields[f].size) != 0)
            differ |= 1u << f;
    return differ;
}

/* Records compared per memcmp block: large enough that the per-block cost
 * vanishes, small enough that a difference is located inside one L2-sized
 * stretch that is still in cache. */
#define CP_BLOCK_BYTES 65536u

int cp_first_divergence(uint32_t record_type, uint32_t field_mask, const uint8_t *a,
                        size_t a_len, const uint8_t *b, size_t b_len, cp_divergence *out)
{
    const cp_layout *l = layout_of(record_type);
    if (l == NULL)
        return CP_ERR_RECORD_TYPE;
    if (out == NULL || (a == NULL && a_len != 0) || (b == NULL && b_len != 0))
        return CP_ERR_NULL;
    if (a_len % l->size != 0 || b_len % l->size != 0)
        return CP_ERR_MISALIGNED;
    uint32_t mask = field_mask & (l->nfields >= 32 ? 0xFFFFFFFFu : ((1u << l->nfields) - 1u));
    size_t na = a_len / l->size, nb = b_len / l->size;
    size_t n = na < nb ? na : nb;
    size_t per_block = CP_BLOCK_BYTES / l->size;
    out->count_a = na;
    out->count_b = nb;
    out->fields = 0;
    for (size_t start = 0; start < n && mask != 0; start += per_block) {
        size_t count = n - start < per_block ? n - start : per_block;
        size_t off = start * l->size;
        if (memcmp(a + off, b + off, count * l->size) == 0)
            continue;
        for (size_t i = start; i < start + count; i++) {
            const uint8_t *ra = a + i * l->size, *rb = b + i * l->size;
            if (memcmp(ra, rb, l->size) == 0)
                continue;
            uint32_t differ = record_diff(l, mask, ra, rb);
            if (differ) {
                out->kind = CP_DIV_RECORD;
                out->index = i;
                out->fields = differ;
                return CP_OK;
            }
        }
    }
    out->kind = na == nb ? CP_DIV_EQUAL : CP_DIV_COUNT;
    out->index = na == nb ? 0 : n;
    return CP_OK;
}

int cp_scan_tokens(const uint8_t *records, size_t len, cp_token_scan *out)
{
    const cp_layout *l = layout_of(CP_REC_TOKEN);
    if (out == NULL || (records == NULL && len != 0))
        return CP_ERR_NULL;
    if (len % l->size != 0)
        return CP_ERR_MISALIGNED;
    size_t n = len / l->size;
    out->count = n;
    out->first_live = CP_NONE;
    out->live_count = 0;
    out->first_seq_break = CP_NONE;
    out->first_malformed = CP_NONE;
    /* The common case is a clean log: every record recorded, seq == index,
     * well formed. The loop keeps that path branch-light and only records
     * the first exception of each kind. */
    uint64_t live = 0;
    for (size_t i = 0; i < n; i++) {
        const uint8_t *r = records + i * 32;
        uint8_t prov = r[12];
        int not_recorded = prov != 1;
        live += (uint64_t)not_recorded;
        int bad_seq = load_u64le(r) != (uint64_t)i;
        int malformed = load_u32le(r + 8) == 0 || prov == 0 || prov > 2 ||
                        (r[13] | r[14] | r[15]) != 0;
        if (CP_UNLIKELY(not_recorded | bad_seq | malformed)) {
            if (not_recorded && out->first_live == CP_NONE)
                out->first_live = i;
            if (bad_seq && out->first_seq_break == CP_NONE)
                out->first_seq_break = i;
            if (malformed && out->first_malformed == CP_NONE)
                out->first_malformed = i;
        }
    }
    out->live_count = live;
    return CP_OK;
}
