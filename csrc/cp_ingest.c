/*
 * Member splitters for streaming run documents (issue 13). See cpstore.h for
 * the contract; cpstore/native/ingest_reference.py is the executable spec
 * this file must agree with (tests/test_native_ingest.py proves it).
 *
 * Neither function allocates or recurses: JSON nesting is one counter,
 * msgpack nesting one count of items still owed, so hostile nesting costs
 * nothing but time linear in the input.
 */
#include <string.h>

#include "cpstore.h"

static int is_ws(uint8_t c)
{
    return c == ' ' || c == '\t' || c == '\n' || c == '\r';
}

int cp_json_split(const uint8_t *data, size_t len, size_t start, uint32_t first,
                  uint32_t expect_members, uint64_t *ends, size_t cap,
                  cp_split_result *out)
{
    if (!out || (!data && len) || (!ends && cap))
        return CP_ERR_NULL;
    out->count = 0;
    out->next = start;
    out->first_odd = CP_NONE;
    out->done = 0;
    out->nested_map = 0;
    if (start > len)
        return CP_ERR_TRUNCATED;
    size_t i = start;
    uint64_t depth = 0;   /* 0 between members, 1 inside a member's own brackets */
    uint64_t colons = 0;  /* ':' at depth 1 of the current member */
    int seen = 0;         /* the current member has a non-blank byte */
    int is_map = 0;       /* the current member's first byte was '{' */
    while (out->count < cap) {
        if (i >= len)
            return CP_ERR_TRUNCATED;
        uint8_t c = data[i];
        if (c == '"') {
            seen = 1;
            i++;
            for (;;) {
                const uint8_t *q = memchr(data + i, '"', len - i);
                if (!q)
                    return CP_ERR_TRUNCATED;
                size_t end = (size_t)(q - data);
                size_t back = 0;
                while (end - back > i && data[end - back - 1] == '\\')
                    back++;
                i = end + 1;
                if ((back & 1) == 0)
                    break;
            }
            continue;
        }
        if (c == '{' || c == '[') {
            if (depth == 0 && !seen)
                is_map = (c == '{');
            else if (c == '{')
                out->nested_map = 1;
            seen = 1;
            depth++;
        } else if (c == '}' || c == ']') {
            if (depth == 0) {
                if (!(first && out->count == 0 && !seen)) {
                    if (expect_members && out->first_odd == CP_NONE
                        && (!is_map || colons != expect_members))
                        out->first_odd = out->count;
                    ends[out->count++] = i;
                }
                out->done = 1;
                out->next = i + 1;
                return CP_OK;
            }
            depth--;
        } else if (c == ',' && depth == 0) {
            if (expect_members && out->first_odd == CP_NONE
                && (!is_map || colons != expect_members))
                out->first_odd = out->count;
            ends[out->count++] = i;
            out->next = i + 1;
            first = 0;
            colons = 0;
            seen = 0;
            is_map = 0;
        } else if (c == ':' && depth == 1) {
            colons++;
        } else if (!is_ws(c)) {
            seen = 1;
        }
        i++;
    }
    return CP_OK;
}

/* Bytes of payload after a header byte (0 for none), and items it owes. */
static int mp_header(const uint8_t *p, size_t avail, size_t *head, uint64_t *body,
                     uint64_t *items, int *is_map)
{
    uint8_t c = p[0];
    *body = 0;
    *items = 0;
    *is_map = 0;
    if (c <= 0x7f || c >= 0xe0 || (c >= 0xc0 && c <= 0xc3 && c != 0xc1)) {
        *head = 1;
        return CP_OK;
    }
    if ((c & 0xf0) == 0x80) {
        *head = 1;
        *items = 2u * (c & 0x0f);
        *is_map = 1;
        return CP_OK;
    }
    if ((c & 0xf0) == 0x90) {
        *head = 1;
        *items = c & 0x0f;
        return CP_OK;
    }
    if ((c & 0xe0) == 0xa0) {
        *head = 1;
        *body = c & 0x1f;
        return CP_OK;
    }
    /* Fixed-width payloads. */
    switch (c) {
    case 0xcc: case 0xd0: *head = 1; *body = 1; return CP_OK;
    case 0xcd: case 0xd1: *head = 1; *body = 2; return CP_OK;
    case 0xca: case 0xce: case 0xd2: *head = 1; *body = 4; return CP_OK;
    case 0xcb: case 0xcf: case 0xd3: *head = 1; *body = 8; return CP_OK;
    case 0xd4: *head = 1; *body = 2; return CP_OK;
    case 0xd5: *head = 1; *body = 3; return CP_OK;
    case 0xd6: *head = 1; *body = 5; return CP_OK;
    case 0xd7: *head = 1; *body = 9; return CP_OK;
    case 0xd8: *head = 1; *body = 17; return CP_OK;
    default: break;
    }
    /* Length-prefixed: 1, 2 or 4 big-endian length bytes. */
    size_t n;
    uint64_t extra = 0;
    int kind; /* 0 bytes payload, 1 array, 2 map */
    switch (c) {
    case 0xc4: case 0xd9: n = 1; kind = 0; break;
    case 0xc5: case 0xda: n = 2; kind = 0; break;
    case 0xc6: case 0xdb: n = 4; kind = 0; break;
    case 0xc7: n = 1; kind = 0; extra = 1; break; /* ext: type byte */
    case 0xc8: n = 2; kind = 0; extra = 1; break;
    case 0xc9: n = 4; kind = 0; extra = 1; break;
    case 0xdc: n = 2; kind = 1; break;
    case 0xdd: n = 4; kind = 1; break;
    case 0xde: n = 2; kind = 2; break;
    case 0xdf: n = 4; kind = 2; break;
    default: return CP_ERR_SYNTAX; /* 0xc1, never used */
    }
    if (avail < 1 + n)
        return CP_ERR_TRUNCATED;
    uint64_t v = 0;
    for (size_t k = 0; k < n; k++)
        v = (v << 8) | p[1 + k];
    *head = 1 + n;
    if (kind == 0)
        *body = v + extra;
    else if (kind == 1)
        *items = v;
    else {
        *items = 2 * v;
        *is_map = 1;
    }
    return CP_OK;
}

int cp_msgpack_split(const uint8_t *data, size_t len, size_t start,
                     uint64_t remaining, uint32_t expect_members,
                     uint64_t *ends, size_t cap, cp_split_result *out)
{
    if (!out || (!data && len) || (!ends && cap))
        return CP_ERR_NULL;
    out->count = 0;
    out->next = start;
    out->first_odd = CP_NONE;
    out->done = remaining == 0;
    out->nested_map = 0;
    if (start > len)
        return CP_ERR_TRUNCATED;
    size_t i = start;
    while (out->count < cap && remaining > 0) {
        uint64_t owed = 1;  /* items still to read for this member */
        int top = 1;
        while (owed > 0) {
            if (i >= len)
                return CP_ERR_TRUNCATED;
            size_t head;
            uint64_t body, items;
            int is_map;
            int rc = mp_header(data + i, len - i, &head, &body, &items, &is_map);
            if (rc != CP_OK)
                return rc;
            if (top) {
                if (expect_members && out->first_odd == CP_NONE
                    && (!is_map || items != 2ull * expect_members))
                    out->first_odd = out->count;
                top = 0;
            } else if (is_map) {
                out->nested_map = 1;
            }
            i += head;
            if (body > len - i)
                return CP_ERR_TRUNCATED;
            i += (size_t)body;
            owed -= 1;
            /* Every item takes at least one byte: owing more than the bytes
             * left is truncated input, and the sum can never overflow. */
            if (items > len - i || owed > len - i - items)
                return CP_ERR_TRUNCATED;
            owed += items;
        }
        ends[out->count++] = i;
        out->next = i;
        remaining--;
    }
    out->done = remaining == 0;
    return CP_OK;
}

int cp_hashed_kinds(const uint8_t *records, size_t len, uint32_t *codes,
                    size_t cap, size_t *count)
{
    if (!count || (!records && len) || (!codes && cap))
        return CP_ERR_NULL;
    *count = 0;
    if (len % 32)
        return CP_ERR_MISALIGNED;
    size_t found = 0;
    uint32_t last = 0;  /* 0 is never a kind code: no hit before the first */
    for (size_t off = 0; off < len; off += 32) {
        uint32_t code = (uint32_t)records[off + 8] | (uint32_t)records[off + 9] << 8
                        | (uint32_t)records[off + 10] << 16 | (uint32_t)records[off + 11] << 24;
        if (!(code & 0x80000000u) || code == last)
            continue;
        size_t k = 0;
        while (k < found && codes[k] != code)
            k++;
        if (k == found) {
            if (found == cap) {
                *count = found;
                return CP_ERR_FULL;
            }
            codes[found++] = code;
        }
        last = code;
    }
    *count = found;
    return CP_OK;
}

static void put_u64le(uint8_t *p, uint64_t v)
{
    for (int k = 0; k < 8; k++)
        p[k] = (uint8_t)(v >> (8 * k));
}

int cp_pack_tokens(const uint64_t *seqs, uint64_t first_seq,
                   const uint32_t *kinds, size_t kinds_len,
                   const uint8_t *provs, size_t provs_len,
                   const uint8_t *digests, size_t n, uint8_t *out)
{
    if (n == 0)
        return CP_OK;
    if (!kinds || !provs || !digests || !out)
        return CP_ERR_NULL;
    if ((kinds_len != 1 && kinds_len != n) || (provs_len != 1 && provs_len != n))
        return CP_ERR_LENGTH;
    for (size_t i = 0; i < n; i++) {
        uint8_t *rec = out + 32 * i;
        uint32_t kind = kinds[kinds_len == 1 ? 0 : i];
        put_u64le(rec, seqs ? seqs[i] : first_seq + i);
        rec[8] = (uint8_t)kind;
        rec[9] = (uint8_t)(kind >> 8);
        rec[10] = (uint8_t)(kind >> 16);
        rec[11] = (uint8_t)(kind >> 24);
        rec[12] = provs[provs_len == 1 ? 0 : i];
        rec[13] = rec[14] = rec[15] = 0;
        memcpy(rec + 16, digests + 16 * i, 16);
    }
    return CP_OK;
}

static size_t put_be(uint8_t *p, uint8_t head, uint64_t v, int bytes)
{
    p[0] = head;
    for (int k = 0; k < bytes; k++)
        p[1 + k] = (uint8_t)(v >> (8 * (bytes - 1 - k)));
    return (size_t)bytes + 1;
}

/* msgpack's shortest form of an unsigned integer. */
static size_t enc_uint(uint8_t *p, uint64_t v)
{
    if (v < 0x80) {
        p[0] = (uint8_t)v;
        return 1;
    }
    if (v <= 0xff)
        return put_be(p, 0xcc, v, 1);
    if (v <= 0xffff)
        return put_be(p, 0xcd, v, 2);
    if (v <= 0xffffffffu)
        return put_be(p, 0xce, v, 4);
    return put_be(p, 0xcf, v, 8);
}

/* msgpack's shortest form of a signed integer (non-negatives as unsigned). */
static size_t enc_int(uint8_t *p, int64_t v)
{
    if (v >= 0)
        return enc_uint(p, (uint64_t)v);
    if (v >= -32) {
        p[0] = (uint8_t)(int8_t)v;
        return 1;
    }
    if (v >= -128)
        return put_be(p, 0xd0, (uint64_t)v & 0xff, 1);
    if (v >= -32768)
        return put_be(p, 0xd1, (uint64_t)v & 0xffff, 2);
    if (v >= -2147483647 - 1)
        return put_be(p, 0xd2, (uint64_t)v & 0xffffffffu, 4);
    return put_be(p, 0xd3, (uint64_t)v, 8);
}

int cp_encode_numbers(uint32_t number_type, const uint8_t *data, size_t n,
                      uint8_t *out, size_t out_cap, uint64_t *offsets)
{
    if (!offsets || (n && (!data || !out)))
        return CP_ERR_NULL;
    if (number_type < CP_NUM_INT64 || number_type > CP_NUM_FLOAT64)
        return CP_ERR_RECORD_TYPE;
    if (n > out_cap / 9)
        return CP_ERR_LENGTH;
    size_t at = 0;
    offsets[0] = 0;
    for (size_t i = 0; i < n; i++) {
        uint64_t bits;
        memcpy(&bits, data + 8 * i, 8);
        if (number_type == CP_NUM_INT64) {
            int64_t v;
            memcpy(&v, &bits, 8);
            at += enc_int(out + at, v);
        } else if (number_type == CP_NUM_UINT64) {
            at += enc_uint(out + at, bits);
        } else {
            double d;
            memcpy(&d, &bits, 8);
            if (d != d)
                bits = 0x7ff8000000000000ull;   /* the canonical NaN */
            else if (d == 0.0)
                bits = 0;                       /* -0.0 is 0.0 */
            at += put_be(out + at, 0xcb, bits, 8);
        }
        offsets[i + 1] = at;
    }
    return CP_OK;
}
