/*
 * cpstore native core: canonical digests and elementwise comparison of
 * packed record buffers.
 *
 * Pure C: functions over caller-owned buffers that return status codes.
 * No allocation, no I/O, no Python. build.py reads this header (lines that
 * start with '#' are dropped before it is handed to cffi's cdef), so it
 * holds only declarations cffi understands.
 *
 * The digest is XXH3-128; a digest is written as 16 bytes, big-endian
 * (XXH128_canonicalFromHash), so it equals xxhash.xxh3_128_digest().
 *
 * Record types and their layouts are documented in docs/format.md; the
 * numbers here must match cpstore/native/records.py.
 */
#ifndef CPSTORE_H
#define CPSTORE_H

#include <stddef.h>
#include <stdint.h>

/* Status codes: 0 is success, every failure has its own negative code. */
#define CP_OK 0
#define CP_ERR_NULL -1          /* a required pointer was NULL */
#define CP_ERR_RECORD_TYPE -2   /* unknown record type */
#define CP_ERR_MISALIGNED -3    /* a length is not a whole number of records */
#define CP_ERR_OFFSETS -4       /* offsets not monotonic or past the data */
#define CP_ERR_STATE -5         /* streaming state not initialised or corrupt */
#define CP_ERR_PARTIAL -6       /* digest asked while a record is incomplete */
#define CP_ERR_UNSUPPORTED -7   /* the CPU lacks the asked instruction set */

/* Digest kernel choices for cp_simd_select. */
#define CP_SIMD_AUTO 0
#define CP_SIMD_BASELINE 1      /* the build's baseline (SSE2 on x86-64) */
#define CP_SIMD_AVX2 2
#define CP_SIMD_AVX512 3

/* Record types (docs/format.md). */
#define CP_REC_TOKEN 1          /* 32 bytes */
#define CP_REC_OBSERVATION 2    /* 56 bytes */
#define CP_REC_DECISION 3       /* 32 bytes */
#define CP_REC_EFFECT 4         /* 48 bytes */

/* Result of cp_first_divergence. */
#define CP_DIV_EQUAL 0          /* same count, every record equal */
#define CP_DIV_RECORD 1         /* record `index` differs; `fields` says which */
#define CP_DIV_COUNT 2          /* one array is a strict prefix of the other */

#define CP_ALL_FIELDS 0xFFFFFFFF
#define CP_NONE 0xFFFFFFFFFFFFFFFF

typedef struct {
    int32_t kind;        /* CP_DIV_EQUAL, CP_DIV_RECORD or CP_DIV_COUNT */
    uint32_t fields;     /* bit i set: field i of the record type differs */
    uint64_t index;      /* first differing record, or the shorter count */
    uint64_t count_a;    /* records in a */
    uint64_t count_b;    /* records in b */
} cp_divergence;

/* Streaming sequence-digest state. Caller-owned, opaque, and must not be
 * moved in memory between cp_seq_init and the last use (the XXH3 state is
 * kept at a 64-byte aligned address inside it). */
typedef struct {
    unsigned char opaque[1024];
} cp_seq_state;

/* Size in bytes of one record of `record_type`, or 0 when unknown. */
size_t cp_record_size(uint32_t record_type);

/* Number of fields of `record_type` (bits used in cp_divergence.fields). */
uint32_t cp_record_field_count(uint32_t record_type);

/* Name of the SIMD path the digest functions use ("avx512", "avx2", "sse2",
 * "scalar"). Never NULL; the string is static. */
const char *cp_simd_path(void);

/* Choose the digest kernels. CP_SIMD_AUTO (what every process starts with)
 * picks the best the CPU has; asking for one the CPU lacks returns
 * CP_ERR_UNSUPPORTED and changes nothing. Every choice gives the same bytes;
 * this exists so tests can prove that and benchmarks can compare them. */
int cp_simd_select(uint32_t level);

/* XXH3-128 of data[0:len] into out[16]. data may be NULL when len is 0. */
int cp_digest(const uint8_t *data, size_t len, uint8_t *out);

/* XXH3-128 of n items: item i is data[offsets[i]:offsets[i+1]].
 * offsets has n+1 entries, starts anywhere, never decreases, and
 * offsets[n] <= data_len. out has room for n*16 bytes. */
int cp_digest_batch(const uint8_t *data, size_t data_len,
                    const uint64_t *offsets, size_t n, uint8_t *out);

/* Sequence digest of a packed record array, in one call. */
int cp_seq_digest(uint32_t record_type, const uint8_t *records, size_t len,
                  uint8_t *out);

/* Streaming sequence digest. Updates may split records anywhere; the digest
 * may be taken at any record boundary and updating may go on after it. */
int cp_seq_init(cp_seq_state *state, uint32_t record_type);
int cp_seq_update(cp_seq_state *state, const uint8_t *data, size_t len);
int cp_seq_final(const cp_seq_state *state, uint8_t *out);
/* Records hashed so far (complete records only); CP_ERR_STATE on a bad state. */
int cp_seq_count(const cp_seq_state *state, uint64_t *count);

/* First divergence between packed arrays a and b of `record_type`,
 * comparing only the fields whose bit is set in field_mask (bit i is field
 * i of the record type; CP_ALL_FIELDS compares every byte). Runs at memcmp
 * speed over equal stretches. */
int cp_first_divergence(uint32_t record_type, uint32_t field_mask,
                        const uint8_t *a, size_t a_len,
                        const uint8_t *b, size_t b_len,
                        cp_divergence *out);

/* One pass over a packed token array: what the decision table needs to know
 * about a single log (docs/decision-table.md). An index of CP_NONE means
 * "no such record". */
typedef struct {
    uint64_t count;            /* records in the array */
    uint64_t first_live;       /* first record whose provenance is not RECORDED */
    uint64_t live_count;       /* records whose provenance is not RECORDED */
    uint64_t first_seq_break;  /* first record i whose seq is not i */
    uint64_t first_malformed;  /* first record with kind 0, provenance not 1 or 2,
                                  or non-zero reserved bytes */
} cp_token_scan;

int cp_scan_tokens(const uint8_t *records, size_t len, cp_token_scan *out);

/* ---- issue 16: content-defined chunking (csrc/cp_chunk.c) -------------- */
/* Spec: cpstore/native/chunking.py (cut_points); docs/format.md,
 * "Content-defined chunks". */

#define CP_ERR_CHUNK_PARAMS -21 /* chunk sizes out of bounds (see cp_chunk_cuts) */
#define CP_ERR_CHUNK_SPACE -22  /* more chunks than the cuts array holds */

/* End offsets (exclusive) of the content-defined chunks of data[0:len] into
 * cuts[0:*count], the last one len; no chunks for len 0. Sizes must satisfy
 * 1 <= min_size <= avg_size <= max_size <= 2**30 and avg_size must be a
 * power of two from 64 (else CP_ERR_CHUNK_PARAMS). Every chunk but the last
 * is at least min_size bytes, so cap = len / min_size + 1 always suffices;
 * with less room CP_ERR_CHUNK_SPACE is returned and *count holds the cuts
 * written. data may be NULL when len is 0, cuts when cap is 0. */
int cp_chunk_cuts(const uint8_t *data, size_t len, uint32_t min_size, uint32_t avg_size,
                  uint32_t max_size, uint64_t *cuts, size_t cap, size_t *count);

/* cp_chunk_cuts and the XXH3-128 of every chunk (as cp_digest: 16 bytes,
 * big-endian) into digests[16*i : 16*i+16], in one pass: each chunk is hashed
 * right after it is cut, while it is in cache. digests has room for 16*cap
 * bytes (may be NULL when cap is 0). Same errors as cp_chunk_cuts. */
int cp_chunk_digests(const uint8_t *data, size_t len, uint32_t min_size, uint32_t avg_size,
                     uint32_t max_size, uint64_t *cuts, uint8_t *digests, size_t cap,
                     size_t *count);

/* ---- end issue 16 ------------------------------------------------------- */

/* ==== streaming ingest (issue 13; cp_ingest.c) ==============================
 * Member splitters for run documents: they find where each member of a JSON
 * array/object or each item of a msgpack array ends, so a document's token
 * list can be decoded in bounded chunks without one Python object per token.
 * They do not validate syntax beyond what they need to split (strings,
 * brackets, msgpack headers and lengths): the caller decodes every chunk
 * with a full parser and checks it holds the counted members. A call stops
 * after `cap` members and can be resumed from `next`. */
#define CP_ERR_TRUNCATED -31    /* input ends inside a member (or a string) */
#define CP_ERR_SYNTAX -32       /* a byte no member can hold at that point */

typedef struct {
    uint64_t count;         /* members found by this call (entries of ends) */
    uint64_t next;          /* offset where a resumed call starts */
    uint64_t first_odd;     /* first member (this call's index) that is not a map
                               of exactly expect_members entries, or CP_NONE;
                               only when expect_members != 0 */
    uint32_t done;          /* 1: the container ended (JSON: closing bracket
                               reached; msgpack: remaining items all read) */
    uint32_t nested_map;    /* 1: some member holds a map/object inside it */
} cp_split_result;

/* JSON: members of the array or object whose body starts at data[start]
 * (just after its opening bracket when first is 1, else just after a
 * separating comma). ends[i] is the offset of the ',' or closing bracket
 * that ends member i; an object member counts as one member per ':' at its
 * own top level. An empty container (first == 1, only whitespace before the
 * closing bracket) has no members; any other empty member is still counted
 * (so the caller's parser sees and refuses it). */
int cp_json_split(const uint8_t *data, size_t len, size_t start, uint32_t first,
                  uint32_t expect_members, uint64_t *ends, size_t cap,
                  cp_split_result *out);

/* msgpack: the next min(remaining, cap) items starting at data[start];
 * ends[i] is the offset just past item i. done is 1 when remaining items
 * were all read. */
int cp_msgpack_split(const uint8_t *data, size_t len, size_t start,
                     uint64_t remaining, uint32_t expect_members,
                     uint64_t *ends, size_t cap, cp_split_result *out);
/* The distinct hashed kind codes (high bit set) of a packed token array, in
 * the order first seen, into codes[0:cap]; *count gets how many. When there
 * are more than cap, returns CP_ERR_FULL with the first cap in codes. Lets
 * a validator learn which kind names a log needs without a Python object
 * per token. */
#define CP_ERR_FULL -33         /* more distinct values than the caller's room */
int cp_hashed_kinds(const uint8_t *records, size_t len, uint32_t *codes,
                    size_t cap, size_t *count);
/* TOKEN records from columns into out[0:32*n] (docs/format.md): record i
 * gets seq seqs[i] (or first_seq + i when seqs is NULL), kind kinds[i] and
 * provenance provs[i] (a column of length 1 is used for every record; any
 * other length but n is CP_ERR_LENGTH), digest digests[16*i:16*i+16], and
 * zero reserved bytes. Checks nothing else: the caller checks the values. */
#define CP_ERR_LENGTH -34       /* a column's length is neither 1 nor n */
int cp_pack_tokens(const uint64_t *seqs, uint64_t first_seq,
                   const uint32_t *kinds, size_t kinds_len,
                   const uint8_t *provs, size_t provs_len,
                   const uint8_t *digests, size_t n, uint8_t *out);
/* Canonical encodings (docs/format.md) of n numbers, back to back into
 * out[0:out_cap], with offsets[0..n] (offsets[0] = 0) where each starts and
 * ends. number_type says what data holds, n native-order elements of:
 * CP_NUM_INT64, CP_NUM_UINT64 or CP_NUM_FLOAT64 (NaN written as the one
 * canonical NaN, -0.0 as 0.0). out_cap must be at least 9*n (the longest
 * encoding), else CP_ERR_LENGTH. */
#define CP_NUM_INT64 1
#define CP_NUM_UINT64 2
#define CP_NUM_FLOAT64 3
int cp_encode_numbers(uint32_t number_type, const uint8_t *data, size_t n,
                      uint8_t *out, size_t out_cap, uint64_t *offsets);
/* ==== end of streaming ingest =============================================== */

/* ==== canonical-form check (audit31; cp_canon.c) ===========================
 * Whether each value data[offsets[i]:offsets[i+1]] (i < n; offsets has n+1
 * entries) is exactly one value in cpstore's canonical encoding
 * (docs/format.md): shortest int/str/bin/array/map/ext headers, no float 32,
 * only the one NaN and no -0.0, strict UTF-8 str, ext 1 only (minimal two's
 * complement outside [-2**63, 2**64)), map keys scalar and strictly
 * increasing by their bytes, no two keys equal once read (True, 1, 1.0),
 * nesting at most 256 deep. out->index is the first value that is not (or
 * CP_NONE), out->offset the byte in data where that was seen, out->reason
 * one of CP_CANON_*. The spec is canonical.decode_value's round trip. */
#define CP_CANON_TRUNCATED 1    /* the value ends early (or is empty) */
#define CP_CANON_TRAILING 2     /* bytes after the one value */
#define CP_CANON_BAD_BYTE 3     /* 0xc1, a byte no msgpack item starts with */
#define CP_CANON_LONG_FORM 4    /* a header longer than the value needs */
#define CP_CANON_FLOAT 5        /* float 32, a non-canonical NaN, or -0.0 */
#define CP_CANON_UTF8 6         /* str that is not strict UTF-8 */
#define CP_CANON_EXT 7          /* ext not type 1, or a bigint not minimal / in range */
#define CP_CANON_KEY_ORDER 8    /* map keys not strictly increasing by bytes */
#define CP_CANON_KEY_TYPE 9     /* an array or map as a map key */
#define CP_CANON_KEY_EQUAL 10   /* two map keys equal once read (True == 1 == 1.0) */
#define CP_CANON_DEPTH 11       /* nested deeper than 256 */
#define CP_CANON_OFFSETS 12     /* offsets decreasing or past the data */
typedef struct {
    uint64_t index;
    uint64_t offset;
    uint32_t reason;
} cp_canon_result;
int cp_canonical_check(const uint8_t *data, size_t len, const uint64_t *offsets,
                       size_t n, cp_canon_result *out);
/* ==== end of canonical-form check =========================================== */

#endif
