"""The low level, importable on its own (like argon2-cffi's ``low_level``).

The cffi binding (:mod:`cpstore.native.binding`, the one module that touches
the compiled core), the record formats and their packers
(:mod:`cpstore.native.records`), canonical encoding
(:mod:`cpstore.native.canonical`) and state digests. The pure-Python twins of
every native function are :mod:`cpstore.native.reference`; argument checks
are :mod:`cpstore.native.args`. Formats: docs/format.md.
"""

from __future__ import annotations

from cpstore.native.binding import (
    SIMD_LEVELS,
    SequenceHasher,
    digest,
    digest_batch,
    digest_batch_into,
    digest_small,
    first_divergence,
    native_digest,
    scan_tokens,
    select_simd,
    sequence_digest,
    simd_path,
)
from cpstore.native.canonical import (
    MAX_DEPTH,
    decode_value,
    encode_value,
)
from cpstore.native.records import (
    DIGEST_SIZE,
    FORMAT_VERSION,
    NONE,
    RECORD_FIELDS,
    RECORD_SIZE,
    SEQ_MAGIC,
    Digest,
    Divergence,
    DivergenceKind,
    KindTable,
    Provenance,
    RecordType,
    TokenScan,
    field_names,
    kind_code,
    kind_name,
    pack_decision,
    pack_effect,
    pack_observation,
    pack_token,
    pack_token_value,
    record_count,
    seq_prefix,
    seq_trailer,
    string_digest,
    unpack_decision,
    unpack_effect,
    unpack_observation,
    unpack_token,
    value_digest,
)
from cpstore.native.state import (
    part_digest,
    state_digest,
)

__all__ = [
    "DIGEST_SIZE",
    "FORMAT_VERSION",
    "MAX_DEPTH",
    "NONE",
    "RECORD_FIELDS",
    "RECORD_SIZE",
    "SEQ_MAGIC",
    "SIMD_LEVELS",
    "Digest",
    "Divergence",
    "DivergenceKind",
    "KindTable",
    "Provenance",
    "RecordType",
    "SequenceHasher",
    "TokenScan",
    "decode_value",
    "digest",
    "digest_batch",
    "digest_batch_into",
    "digest_small",
    "encode_value",
    "field_names",
    "first_divergence",
    "kind_code",
    "kind_name",
    "native_digest",
    "pack_decision",
    "pack_effect",
    "pack_observation",
    "pack_token",
    "pack_token_value",
    "part_digest",
    "record_count",
    "scan_tokens",
    "select_simd",
    "seq_prefix",
    "seq_trailer",
    "sequence_digest",
    "simd_path",
    "state_digest",
    "string_digest",
    "unpack_decision",
    "unpack_effect",
    "unpack_observation",
    "unpack_token",
    "value_digest",
]
