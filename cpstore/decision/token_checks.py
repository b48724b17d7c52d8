"""The token stream's check: records compared, refusals counted, hashed kinds named.

:func:`check_tokens` compares R's and P's token records (the native first
divergence, then the kind names behind equal hashed codes), and counts the
refused requests a replay's cursor kept in P; :func:`token_scan` and
:func:`scan_findings` are one side's own scan, which :func:`cpstore.decision.checks.find_alone`
runs too. The other streams' checks are in :mod:`cpstore.decision.checks`.
"""

from __future__ import annotations

import re
import struct
import sys
from collections.abc import Sequence
from dataclasses import replace
from typing import Any

from cpstore.decision.sides import Side, canonical_or_repr
from cpstore.decision.table import (
    TOKEN_FIELDS,
    TOKEN_SIZE,
    Finding,
    FindingCode,
)
from cpstore.errors import InvalidInputError, RecordFormatError
from cpstore.native.binding import first_divergence, hashed_kinds, scan_tokens
from cpstore.native.records import REFUSED_TAIL, DivergenceKind, RecordType, TokenScan
from cpstore.run.model import TokenInfo

__all__ = ["REFUSAL_LOOKS", "check_tokens", "scan_findings", "token_scan"]


def _token_dict(info: TokenInfo) -> dict[str, Any]:
    out: dict[str, Any] = {"seq": info.seq, "kind": info.kind, "provenance": info.provenance}
    if info.has_value:
        out["value"] = info.value
    out["value_digest"] = info.value_digest
    return out


#: A refused request as ReplayCursor keeps it in P, from byte 12 of its record:
#: recorded provenance, reserved bytes zero, the digest of the value None.
_REFUSED_TAIL = re.compile(re.escape(REFUSED_TAIL))


#: Placeholder-like records :func:`_refusals` looks at before it stops counting: a
#: real replay's refusals are a handful (each one raised); a document full of recorded
#: None values must not make the count cost more than the whole token check.
REFUSAL_LOOKS = 1 << 12


def _refusals(r: memoryview, p: memoryview, first: int) -> int | None:
    """How many of P's token records are refused requests the cursor kept (audit31);
    None when more than :data:`REFUSAL_LOOKS` records look like one (not counted).

    A refusal does not advance the cursor: it is a record with seq = the cursor's
    index k (the P records before it less the refusals), the value None and a kind
    other than R's record k (the cursor refuses a kind that differs, or any request
    past the log); a resolved token is R's record k byte for byte, so a recorded None
    is never counted. ``first``: the first index where P's record differs from R's
    (none before it is a refusal). Only records with the placeholder's tail are
    looked at, found by a search of the buffer."""
    rb, pb = r.cast("B"), p.cast("B")
    n_r = len(rb) // TOKEN_SIZE
    refused = 0
    looks = 0
    found = _REFUSED_TAIL.search(pb, first * TOKEN_SIZE + 12)
    while found is not None:
        start = found.start() - 12
        if start % TOKEN_SIZE == 0:
            looks += 1
            if looks > REFUSAL_LOOKS:
                return None
            k = start // TOKEN_SIZE - refused
            if int.from_bytes(pb[start : start + 8], "little") == k and (
                k >= n_r
                or rb[k * TOKEN_SIZE + 8 : k * TOKEN_SIZE + 12] != pb[start + 8 : start + 12]
            ):
                refused += 1
        found = _REFUSED_TAIL.search(pb, found.start() + 1)
    return refused


def token_scan(side: Side, out: list[Finding]) -> TokenScan:
    """``side``'s token records scanned; a malformed one is INTEGRITY when stored, else raised."""
    scan = scan_tokens(side.tokens)
    if scan.first_malformed is not None:
        where = f"{side.label}.tokens[{scan.first_malformed}]"
        if not side.from_store:
            raise RecordFormatError(
                "malformed token record (kind 0, unknown provenance or reserved bytes set)",
                where=where,
            )
        out.append(
            Finding(
                FindingCode.INTEGRITY,
                "tokens",
                side.label,
                scan.first_malformed,
                "index",
                "a well-formed token record",
                "malformed",
                f"stored token record {where} is malformed",
            )
        )
    return scan


def check_tokens(r: Side, p: Side, out: list[Finding]) -> None:
    """TOKEN_MISMATCH, TOKEN_COUNT, then each side's :func:`scan_findings`."""
    scans = {side.label: token_scan(side, out) for side in (r, p)}
    div = first_divergence(RecordType.TOKEN, r.tokens, p.tokens, fields=TOKEN_FIELDS)
    index = div.index if div.kind is DivergenceKind.RECORD else None
    fields = div.fields
    limit = min(div.count_a, div.count_b) if index is None else index
    # The kernel compares kind *codes*; a hashed code is 31 bits of a name's
    # hash, so equal codes prove nothing until the names behind them agree.
    renamed = _kind_name_divergence(r, p, limit)
    if renamed is not None:
        index, fields = renamed, ("kind",)
    if index is not None:
        ri, pi = _shown(r.token_info(index)), _shown(p.token_info(index))
        out.append(
            Finding(
                FindingCode.TOKEN_MISMATCH,
                "tokens",
                "both",
                index,  # the stream position, not R's seq field, maybe broken (audit57)
                "seq",
                canonical_or_repr(_token_dict(ri)),
                canonical_or_repr(_token_dict(pi)),
                f"token {index} differs in {', '.join(fields)}: recorded {ri.kind} "
                f"{_short(ri)} vs replayed {pi.kind} {_short(pi)}",
            )
        )
    if div.count_a != div.count_b:
        more = "more" if div.count_b > div.count_a else "fewer"
        same = min(div.count_a, div.count_b) if div.index is None else div.index
        refused = _refusals(r.tokens, p.tokens, same)
        if refused is None:
            did = f"holds {div.count_b} token entries (refused requests among them not counted)"
        elif refused:
            did = (
                f"consumed {div.count_b - refused} tokens and was refused {refused} "
                f"({div.count_b} entries)"
            )
        else:
            did = f"consumed {div.count_b} tokens"
        out.append(
            Finding(
                FindingCode.TOKEN_COUNT,
                "tokens",
                "both",
                min(div.count_a, div.count_b),
                "index",
                div.count_a,
                div.count_b,
                f"replay {did}, {more} than the {div.count_a} recorded",
            )
        )
    for side in (r, p):
        scan_findings(side, scans[side.label], out)


def scan_findings(side: Side, scan: TokenScan, out: list[Finding]) -> None:
    """LIVE_RESOLUTION (either side) and TOKEN_SEQUENCE (R): one side's own scan."""
    if scan.first_live is not None:
        at = scan.first_live
        info = side.token_info(at)
        claimed = "" if info.seq == at else f" (its record claims seq {info.seq})"
        out.append(
            Finding(
                FindingCode.LIVE_RESOLUTION,
                "tokens",
                side.label,
                at,  # the stream position, not the seq the record claims (audit68, as audit57)
                "seq",
                "recorded",
                info.provenance,
                f"{side.label} token seq={at}{claimed} kind={info.kind} was resolved from a "
                f"live source ({scan.live_count} such tokens)",
                scan.live_count,
            )
        )
    if side.label == "recorded" and scan.first_seq_break is not None:
        info = side.token_info(scan.first_seq_break)
        out.append(
            Finding(
                FindingCode.TOKEN_SEQUENCE,
                "tokens",
                "recorded",
                scan.first_seq_break,
                "index",
                scan.first_seq_break,
                info.seq,
                f"recorded token {scan.first_seq_break} has seq {info.seq}; "
                "seqs must be 0, 1, 2, ...",
            )
        )


_HASHED_KIND = 0x80000000
_KIND_FIELD = struct.Struct("<8xI20x")


def _kind_column(tokens: memoryview, limit: int) -> Sequence[int]:
    """The kind code of each of the first ``limit`` token records."""
    if sys.byteorder == "little":
        return tokens[: limit * TOKEN_SIZE].cast("I")[2::8]
    return [c for (c,) in _KIND_FIELD.iter_unpack(tokens[: limit * TOKEN_SIZE])]


def _kind_name_divergence(r: Side, p: Side, limit: int) -> int | None:
    """First token before ``limit`` whose equal hashed kind code stands for different names.

    Before ``limit`` the records are equal field by field, so only R's codes
    are read. A stored R names every hashed code it uses (its recorder's kind
    table refuses two names with one code); any other R is scanned, and a
    hashed code it does not name is bad input. A code P does not name, or
    names differently, is not proven the same kind: a TOKEN_MISMATCH.
    """
    if r.from_store:
        used: Sequence[int] | set[int] = [c for c in r.kind_names if c & _HASHED_KIND]
    else:
        count = r.tokens.nbytes // TOKEN_SIZE
        # One native pass finds the few distinct hashed codes; a log with
        # more than it has room for is collected by set() (C, but an int each).
        codes, more = hashed_kinds(r.tokens)
        distinct = set(_kind_column(r.tokens, count)) if more else codes
        used = {c for c in distinct if c & _HASHED_KIND}
        unnamed = sorted(c for c in used if c not in r.kind_names)
        if unnamed:
            raise InvalidInputError(
                "a hashed token kind code has no name; kind identity cannot rest on a hash",
                where=f"{r.label}.tokens.kind_names",
                expected="a name for every hashed code used",
                got=f"0x{unnamed[0]:08x}",
            )
    suspect = {c for c in used if p.kind_names.get(c) != r.kind_names.get(c)}
    if not suspect or limit == 0:
        return None
    for i, code in enumerate(_kind_column(r.tokens, limit)):
        if code in suspect:
            return i
    return None


def _shown(info: TokenInfo) -> TokenInfo:
    """``info`` with its value as the canonical encoding reads it back, as every input
    path shows it (:func:`~cpstore.decision.sides.canonical_or_repr`)."""
    return replace(info, value=canonical_or_repr(info.value)) if info.has_value else info


def _short(info: TokenInfo) -> str:
    if info.has_value:
        text = repr(info.value)
        return text if len(text) <= 40 else text[:37] + "..."
    return f"#{info.value_digest[:12]}"
