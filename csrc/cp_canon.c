/*
 * Canonical-form checker (audit31's open wrong ACCEPT). See cpstore.h for
 * the contract; cpstore/native/ingest_reference.py's canonical_check (the
 * canonical encoder's own round trip: decode_value) is the executable spec
 * this file must agree with (tests/test_native_canonical.py proves it).
 *
 * No allocation, no recursion: nesting is a fixed stack of frames bounded by
 * the encoder's MAX_DEPTH. Map keys are strictly increasing by bytes; keys
 * that differ in bytes but are equal once read (True == 1 == 1.0) are found
 * by a pass that runs only for maps holding numeric keys of two or more
 * types: each bool or integral float key against the others (so its cost is
 * such keys times the map's size).
 */
#include <math.h>
#include <string.h>

#include "cpstore.h"

#define MAX_DEPTH 256

enum { K_NONE = 0, K_BOOL = 1, K_INT = 2, K_FLOAT = 4, K_BIG = 8 };

typedef struct {
    uint64_t left;       /* items still to read (a map: 2 per entry) */
    size_t start;        /* a map: offset of its first key */
    size_t prev_key;     /* a map: offset and length of the last key read */
    size_t prev_len;
    uint64_t read;       /* a map: items read so far (even: a key is next) */
    unsigned kinds;      /* a map: K_* of its numeric keys */
    int is_map;
} frame;

static uint64_t be(const uint8_t *p, int n)
{
    uint64_t v = 0;
    for (int k = 0; k < n; k++)
        v = (v << 8) | p[k];
    return v;
}

/* Strict UTF-8 as Python decodes it: no overlongs, surrogates or > U+10FFFF. */
static int utf8_ok(const uint8_t *s, size_t n)
{
    size_t i = 0;
    while (i < n) {
        uint8_t c = s[i];
        if (c < 0x80) {
            i++;
            continue;
        }
        size_t need;
        uint8_t lo = 0x80, hi = 0xbf;
        if (c >= 0xc2 && c <= 0xdf)
            need = 1;
        else if (c >= 0xe0 && c <= 0xef) {
            need = 2;
            if (c == 0xe0)
                lo = 0xa0;
            else if (c == 0xed)
                hi = 0x9f;
        } else if (c >= 0xf0 && c <= 0xf4) {
            need = 3;
            if (c == 0xf0)
                lo = 0x90;
            else if (c == 0xf4)
                hi = 0x8f;
        } else
            return 0;
        if (n - i - 1 < need)
            return 0;
        if (s[i + 1] < lo || s[i + 1] > hi)
            return 0;
        for (size_t k = 2; k <= need; k++)
            if ((s[i + k] & 0xc0) != 0x80)
                return 0;
        i += need + 1;
    }
    return 1;
}

/* One scalar or container header at p (avail bytes): its canonical check.
 * *head: header bytes; *body: payload bytes after it; *items: items owed;
 * *kind: K_* for a numeric scalar (K_NONE otherwise). Returns 0 or a reason. */
static inline uint32_t item(const uint8_t *p, size_t avail, size_t *head, uint64_t *body,
                     uint64_t *items, int *is_map, unsigned *kind)
{
    uint8_t c = p[0];
    *head = 1;
    *body = 0;
    *items = 0;
    *is_map = 0;
    *kind = K_NONE;
    if (c <= 0x7f || c >= 0xe0) {
        *kind = K_INT;
        return 0;
    }
    if (c <= 0x8f) {
        *items = 2u * (c & 0x0f);
        *is_map = 1;
        return 0;
    }
    if (c <= 0x9f) {
        *items = c & 0x0f;
        return 0;
    }
    if (c <= 0xbf) {
        *body = c & 0x1f;
        return 0;
    }
    if (c == 0xc0)
        return 0;
    if (c == 0xc2 || c == 0xc3) {
        *kind = K_BOOL;
        return 0;
    }
    static const uint8_t width[32] = {
        /* c0 */ 0, 0, 0, 0, 1, 2, 4, 1, 2, 4, 4, 8, 1, 2, 4, 8,
        /* d0 */ 1, 2, 4, 8, 1, 2, 4, 8, 16, 1, 2, 4, 2, 4, 2, 4,
    };
    int n = width[c - 0xc0];
    if (c == 0xc1 || c == 0xca)
        return c == 0xc1 ? CP_CANON_BAD_BYTE : CP_CANON_FLOAT;
    int lenhdr = (c >= 0xc4 && c <= 0xc9) || c >= 0xd9;
    if (avail < 1 + (size_t)n + (c >= 0xc7 && c <= 0xc9))
        return CP_CANON_TRUNCATED;
    uint64_t v = be(p + 1, n);
    if (!lenhdr && c != 0xcb && !(c >= 0xd4 && c <= 0xd8)) { /* ints */
        *head = 1 + (size_t)n;
        *kind = K_INT;
        if (c <= 0xcf) {
            uint64_t floor_ = c == 0xcc ? 0x80 : c == 0xcd ? 0x100 : c == 0xce ? 0x10000
                                                             : 0x100000000ull;
            return v < floor_ ? CP_CANON_LONG_FORM : 0;
        }
        int64_t s = n == 1 ? (int8_t)v : n == 2 ? (int16_t)v : n == 4 ? (int32_t)v : (int64_t)v;
        int64_t ceil_ = c == 0xd0 ? -32 : c == 0xd1 ? -128 : c == 0xd2 ? -32768
                                                      : -2147483647 - 1;
        return s >= ceil_ ? CP_CANON_LONG_FORM : 0;
    }
    if (c == 0xcb) {
        *head = 9;
        *kind = K_FLOAT;
        if (v == 0x8000000000000000ull)
            return CP_CANON_FLOAT;
        if ((v & 0x7ff0000000000000ull) == 0x7ff0000000000000ull
            && (v & 0x000fffffffffffffull) && v != 0x7ff8000000000000ull)
            return CP_CANON_FLOAT;
        return 0;
    }
    if (c >= 0xd4 && c <= 0xd8) { /* fixext: type byte + n bytes */
        *head = 2;
        *body = (uint64_t)n;
        *kind = K_BIG;
        return 0;
    }
    *head = 1 + (size_t)n;
    switch (c) {
    case 0xc4: case 0xc5: case 0xc6:
        *body = v;
        return (c == 0xc5 && v < 0x100) || (c == 0xc6 && v < 0x10000) ? CP_CANON_LONG_FORM : 0;
    case 0xc7: case 0xc8: case 0xc9:
        *head += 1;
        *body = v;
        *kind = K_BIG;
        if (v == 1 || v == 2 || v == 4 || v == 8 || v == 16)
            return CP_CANON_LONG_FORM;
        return (c == 0xc8 && v < 0x100) || (c == 0xc9 && v < 0x10000) ? CP_CANON_LONG_FORM : 0;
    case 0xd9: case 0xda: case 0xdb:
        *body = v;
        return (c == 0xd9 && v < 32) || (c == 0xda && v < 0x100) || (c == 0xdb && v < 0x10000)
                   ? CP_CANON_LONG_FORM : 0;
    case 0xdc: case 0xdd:
        *items = v;
        return v < 16 || (c == 0xdd && v < 0x10000) ? CP_CANON_LONG_FORM : 0;
    default: /* 0xde, 0xdf */
        *items = 2 * v;
        *is_map = 1;
        return v < 16 || (c == 0xdf && v < 0x10000) ? CP_CANON_LONG_FORM : 0;
    }
}

/* The bigint ext payload (type byte, then minimal two's complement outside
 * [-2**63, 2**64)); t points at the type byte, n payload bytes follow. */
static uint32_t bigint_ok(const uint8_t *t, uint64_t n)
{
    if (t[0] != 1 || n == 0)
        return CP_CANON_EXT;
    const uint8_t *b = t + 1;
    if (n >= 2 && ((b[0] == 0x00 && b[1] < 0x80) || (b[0] == 0xff && b[1] >= 0x80)))
        return CP_CANON_EXT;
    if (n < 9 || (n == 9 && b[0] == 0x00))
        return CP_CANON_EXT;  /* in range: msgpack's own int form is canonical */
    return 0;
}

/* A numeric key as a number: small (int in [-2**63, 2**64)) or big bytes. */
typedef struct {
    int big;          /* 1: bytes[0:len] hold minimal two's complement */
    int neg;
    uint64_t u;       /* small: the value (two's complement when neg) */
    uint8_t bytes[140];
    size_t len;
    int none;         /* 1: a float that equals no integer (never cross-equal) */
} num;

static void key_num(const uint8_t *p, num *o)
{
    memset(o, 0, sizeof *o);
    uint8_t c = p[0];
    if (c == 0xc2 || c == 0xc3) {
        o->u = c == 0xc3;
        return;
    }
    if (c <= 0x7f) {
        o->u = c;
        return;
    }
    if (c >= 0xe0) {
        o->neg = 1;
        o->u = (uint64_t)(int64_t)(int8_t)c;
        return;
    }
    if (c >= 0xcc && c <= 0xcf) {
        int n = 1 << (c - 0xcc);
        o->u = be(p + 1, n);
        return;
    }
    if (c >= 0xd0 && c <= 0xd3) {
        int n = 1 << (c - 0xd0);
        uint64_t v = be(p + 1, n);
        int64_t s = n == 1 ? (int8_t)v : n == 2 ? (int16_t)v : n == 4 ? (int32_t)v : (int64_t)v;
        o->neg = 1;
        o->u = (uint64_t)s;
        return;
    }
    if (c == 0xcb) {
        uint64_t bits = be(p + 1, 8);
        double d;
        memcpy(&d, &bits, 8);
        if (!isfinite(d) || floor(d) != d) {
            o->none = 1;
            return;
        }
        if (d >= -9223372036854775808.0 && d < 18446744073709551616.0) {
            o->neg = d < 0;
            o->u = d < 0 ? (uint64_t)(int64_t)d : (uint64_t)d;
            return;
        }
        /* |d| >= 2**63: mant * 2**shift with a 53-bit mant and shift >= 11. */
        int e;
        double f = frexp(fabs(d), &e);
        uint64_t mant = (uint64_t)ldexp(f, 53);
        int shift = e - 53;
        uint8_t mag[140] = {0};  /* little-endian magnitude */
        uint64_t m = mant << (shift % 8);
        for (int k = 0; k < 8; k++)
            mag[shift / 8 + k] = (uint8_t)(m >> (8 * k));
        int bits_len = e;  /* bit length of |d| */
        if (d < 0 && mant == (1ull << 52))
            bits_len = e - 1;  /* bit_length(|d| - 1) for a power of two */
        size_t size = (size_t)bits_len / 8 + 1;
        if (d < 0) {  /* two's complement over size bytes: ~mag + 1 */
            unsigned carry = 1;
            for (size_t k = 0; k < size; k++) {
                unsigned x = (uint8_t)~mag[k] + carry;
                mag[k] = (uint8_t)x;
                carry = x >> 8;
            }
        }
        o->big = 1;
        o->len = size;
        for (size_t k = 0; k < size; k++)
            o->bytes[k] = mag[size - 1 - k];
        return;
    }
    /* ext 1 (already checked): d4..d8 or c7..c9 */
    size_t hl = c >= 0xd4 ? 1 : c == 0xc7 ? 2 : c == 0xc8 ? 3 : 5;
    uint64_t n = c >= 0xd4 ? (1u << (c - 0xd4)) : be(p + 1, (int)hl - 1);
    o->big = 1;
    o->len = n <= sizeof o->bytes ? (size_t)n : 0;
    if (o->len)
        memcpy(o->bytes, p + hl + 1, o->len);
    else
        o->none = 1;  /* wider than any float: equals no other key type */
}

static int num_eq(const num *a, const num *b)
{
    if (a->none || b->none || a->big != b->big)
        return 0;
    if (a->big)
        return a->len == b->len && memcmp(a->bytes, b->bytes, a->len) == 0;
    return a->neg == b->neg && a->u == b->u;
}

/* Next item after p (already validated): the split walk without checks. */
static size_t skip(const uint8_t *data, size_t i)
{
    uint64_t owed = 1;
    while (owed) {
        size_t head;
        uint64_t body, items;
        int is_map;
        unsigned kind;
        (void)item(data + i, 64, &head, &body, &items, &is_map, &kind);
        i += head + (size_t)body;
        owed += items - 1;
    }
    return i;
}

/* Keys of the map whose first key is at start, entries of them: any two of
 * different numeric types equal once read? */
static int keys_collide(const uint8_t *data, size_t start, uint64_t entries, unsigned kinds)
{
    (void)kinds;
    size_t a = start;
    for (uint64_t i = 0; i < entries; i++) {
        /* Every cross-type equality has a bool or an integral float on one side:
         * only those keys are compared with the others. */
        uint8_t ca = data[a];
        num na;
        if (ca == 0xc2 || ca == 0xc3 || ca == 0xcb)
            key_num(data + a, &na);
        if ((ca == 0xc2 || ca == 0xc3 || ca == 0xcb) && !na.none) {
            size_t b = start;
            for (uint64_t j = 0; j < entries; j++) {
                uint8_t cb = data[b];
                int b_num = j != i
                            && (cb <= 0x7f || cb >= 0xe0 || (cb >= 0xc2 && cb <= 0xc3)
                                || (cb >= 0xc7 && cb <= 0xc9) || (cb >= 0xcb && cb <= 0xd8));
                if (b_num) {
                    num nb;
                    key_num(data + b, &nb);
                    if (num_eq(&na, &nb))
                        return 1;
                }
                b = skip(data, skip(data, b));
            }
        }
        a = skip(data, skip(data, a));
    }
    return 0;
}

/* One value in data[at:end]: 0, or a reason with *where set. */
static uint32_t check_one(const uint8_t *data, size_t at, size_t end, size_t *where)
{
    frame st[MAX_DEPTH + 2];
    int top = -1;  /* frames in use - 1 */
    size_t i = at;
    *where = at;
    do {
        *where = i;
        if (i >= end)
            return CP_CANON_TRUNCATED;
        if (top + 1 > MAX_DEPTH)
            return CP_CANON_DEPTH;
        frame *f = top >= 0 ? &st[top] : NULL;
        int is_key = f && f->is_map && (f->read & 1) == 0;
        size_t head;
        uint64_t body, items;
        int is_map;
        unsigned kind;
        uint32_t why = item(data + i, end - i, &head, &body, &items, &is_map, &kind);
        if (why)
            return why;
        if (head > end - i || body > end - i - head)
            return CP_CANON_TRUNCATED;
        const uint8_t *pay = data + i + head;
        uint8_t c = data[i];
        if ((c >= 0xa0 && c <= 0xbf) || (c >= 0xd9 && c <= 0xdb)) {
            if (!utf8_ok(pay, (size_t)body))
                return CP_CANON_UTF8;
        } else if (kind == K_BIG) {
            why = bigint_ok(pay - 1, body);
            if (why)
                return why;
        }
        if (is_key) {
            if (items || (c >= 0x80 && c <= 0x9f) || (c >= 0xdc && c <= 0xdf))
                return CP_CANON_KEY_TYPE;
            size_t klen = head + (size_t)body;
            if (f->read) {
                size_t m = klen < f->prev_len ? klen : f->prev_len;
                int cmp = memcmp(data + i, data + f->prev_key, m);
                if (cmp < 0 || (cmp == 0 && klen <= f->prev_len))
                    return CP_CANON_KEY_ORDER;
            }
            f->prev_key = i;
            f->prev_len = klen;
            f->kinds |= kind;
        }
        i += head + (size_t)body;
        if (f) {
            f->read++;
            f->left--;
        }
        if (items) {
            /* Every item takes a byte: more owed than bytes left is truncated. */
            if (items > end - i)
                return CP_CANON_TRUNCATED;
            top++;
            st[top].left = items;
            st[top].start = i;
            st[top].read = 0;
            st[top].kinds = K_NONE;
            st[top].is_map = is_map;
            st[top].prev_key = st[top].prev_len = 0;
        }
        while (top >= 0 && st[top].left == 0) {
            frame *g = &st[top];
            if (g->is_map) {
                unsigned k = g->kinds;
                if ((k & (k - 1)) && keys_collide(data, g->start, g->read / 2, k)) {
                    *where = g->start;
                    return CP_CANON_KEY_EQUAL;
                }
            }
            top--;
        }
    } while (top >= 0);
    *where = i;
    return i == end ? 0 : CP_CANON_TRAILING;
}

int cp_canonical_check(const uint8_t *data, size_t len, const uint64_t *offsets,
                       size_t n, cp_canon_result *out)
{
    if (!out || !offsets || (!data && len))
        return CP_ERR_NULL;
    out->index = CP_NONE;
    out->offset = 0;
    out->reason = 0;
    for (size_t k = 0; k < n; k++) {
        uint64_t a = offsets[k], b = offsets[k + 1];
        size_t where = (size_t)a;
        if (a < b && b <= len) {
            /* Fast path: a lone int, float, nil or bool (a column of numbers). */
            uint8_t c = data[a];
            if (c <= 0x7f || c >= 0xe0 || c == 0xc0 || c == 0xc2 || c == 0xc3) {
                if (b - a == 1)
                    continue;
            } else if (c >= 0xcb && c <= 0xd3) {
                size_t head;
                uint64_t body, items;
                int is_map;
                unsigned kind;
                if (item(data + a, (size_t)(b - a), &head, &body, &items, &is_map, &kind) == 0
                    && head == b - a)
                    continue;
            }
        }
        uint32_t why = a > b || b > len ? CP_CANON_OFFSETS : check_one(data, (size_t)a,
                                                                       (size_t)b, &where);
        if (why) {
            out->index = k;
            out->offset = where;
            out->reason = why;
            return CP_OK;
        }
    }
    return CP_OK;
}
