"""Shared builders for the decision-table tests (no tests of its own)."""

from __future__ import annotations

import copy
import functools
import itertools
import json
from typing import TYPE_CHECKING, Any

import msgpack

from cpstore import dump_document, parse_document
from cpstore.native.records import kind_code
from cpstore.run.model import Observation, PackedTokens, ReplayMode, Run

if TYPE_CHECKING:
    from cpstore import Store


def clean_doc(tokens: int = 6, **overrides: Any) -> dict[str, Any]:
    """A clean recording: sealed ledger, every read pinned, strict, seqs 0..n-1."""
    doc: dict[str, Any] = {
        "format": 1,
        "run_id": "run-1",
        "step": 47,
        "state_digest": "state-47",
        "observations": [
            {"step": 3, "source": "clock", "payload_digest": "c3", "pinned_at": 100.0},
            {"step": 12, "source": "read_config", "payload_digest": "cfg-v1", "pinned_at": 101.5},
            {"step": 30, "source": "search", "payload_digest": "s30", "pinned_at": 102.0},
        ],
        "tokens": [
            {
                "seq": i,
                "kind": ("rng", "clock", "tool")[i % 3],
                "value": i * 7,
                "provenance": "recorded",
            }
            for i in range(tokens)
        ],
        "call_graph": [
            {"step": 1, "node": "plan"},
            {"step": 12, "node": "read_config"},
            {"step": 30, "node": {"tool": "search", "args": ["q"]}},
        ],
        "transcript_digest": "transcript-1",
        "effects": [
            {"seq": 0, "target": "db", "payload_digest": "e0"},
            {"seq": 1, "target": "mail", "payload_digest": "e1"},
        ],
        "ledger_sealed": True,
        "harness_accesses": [],
        "provenance_tags": ["agent:v1"],
        "mode": "strict",
    }
    doc.update(overrides)
    return doc


def replay_of(doc: dict[str, Any], **overrides: Any) -> dict[str, Any]:
    """A faithful strict replay of ``doc`` (a deep copy), then ``overrides``."""
    out = copy.deepcopy(doc)
    out["mode"] = "strict"
    out.update(overrides)
    return out


@functools.lru_cache(maxsize=1)
def colliding_kinds() -> tuple[str, str]:
    """Two custom token kind names with one 31-bit code (a birthday search, ~50k names)."""
    seen: dict[int, str] = {}
    for i in itertools.count():
        name = f"kind-{i}"
        code = kind_code(name)
        if code in seen:
            return seen[code], name
        seen[code] = name
    raise AssertionError("unreachable")


def full_replay(store: Store, cid: str, mode: ReplayMode) -> Run:
    """A faithful replay of stored checkpoint ``cid`` in ``mode``, every token's value read
    back (a checkpoint continuing a run holds more than one)."""
    with store.read(cid) as cp:
        m = cp.manifest
        values = [cp.token(i)[3] for i in range(cp.token_count())]
        return Run(
            m.run_id,
            m.step,
            m.state_digest,
            tokens=PackedTokens(bytes(cp.tokens()), values=values),
            observations=tuple(Observation(*o) for o in cp.observations()),
            mode=mode,
            transcript_digest=m.transcript_digest,
        )


def stored_replay(store: Store, cid: str, **changes: Any) -> Run:
    """A faithful STRICT replay of stored checkpoint ``cid`` as a Run; ``changes`` override fields.

    ``state_digest`` among ``changes`` replaces the replayed state digest. The
    checkpoint must hold one token (its value is read back from the store).
    """
    with store.read(cid) as cp:
        m = cp.manifest
        fields: dict[str, Any] = {
            "tokens": PackedTokens(bytes(cp.tokens()), values=[cp.token(0)[3]]),
            "observations": tuple(Observation(*o) for o in cp.observations()),
            "mode": ReplayMode.STRICT,
            "transcript_digest": m.transcript_digest,
        }
        fields.update(changes)
        state = fields.pop("state_digest", m.state_digest)
        return Run(m.run_id, m.step, state, **fields)


def input_forms(doc: dict[str, Any]) -> dict[str, Any]:
    """Run document ``doc`` in every form validate takes: the mapping, a parsed ``Run``,
    JSON and msgpack bytes, and the ``.cprun`` encoding."""
    run = parse_document(doc)
    return {
        "mapping": doc,
        "run": run,
        "json": json.dumps(doc).encode(),
        "msgpack": msgpack.packb(doc, use_bin_type=True),
        "cprun": dump_document(run, encoding="cprun"),
    }
