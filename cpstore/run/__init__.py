"""The run model and run documents (docs/run-document.md)."""

from __future__ import annotations

from cpstore.run.document import (
    DOCUMENT_FORMAT,
    MAX_DOCUMENT_BYTES,
    dump_document,
    load_document,
    parse_document,
)
from cpstore.run.model import (
    Effect,
    Observation,
    PackedTokens,
    ReplayMode,
    Run,
    Token,
    TokenInfo,
)

__all__ = [
    "DOCUMENT_FORMAT",
    "MAX_DOCUMENT_BYTES",
    "Effect",
    "Observation",
    "PackedTokens",
    "ReplayMode",
    "Run",
    "Token",
    "TokenInfo",
    "dump_document",
    "load_document",
    "parse_document",
]
