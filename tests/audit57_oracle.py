"""audit57: a reference decision table, written from docs/decision-table.md alone, and
the field mutations the oracle test applies (helpers for
``tests/test_audit57_mutation_oracle.py``; no tests of their own).

:func:`spec_findings` re-derives, for two run-document mappings, which findings the
table's rows give and where each is located, without reading ``cpstore.decision``:
the test compares ``validate`` with it for every mutation of every field. Only the
canonical encoding (docs/format.md: values compare by it) is borrowed from cpstore.
"""

from __future__ import annotations

import copy
from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from cpstore.native.canonical import encode_value

#: Where a finding is: (code, side) -> (position, unit).
Located = dict[tuple[str, str], tuple[Any, str]]

#: The REJECT-level rows of the table (docs/decision-table.md, "Findings"); the
#: rest are QUARANTINE.
REJECT_CODES = frozenset(
    {
        "INTEGRITY",
        "RUN_MISMATCH",
        "STEP_MISMATCH",
        "REPLAY_OF_REPLAY",
        "STATE_MISMATCH",
        "TOKEN_MISMATCH",
        "TOKEN_COUNT",
        "CALL_GRAPH_MISMATCH",
        "OBSERVATION_MISMATCH",
    }
)


def recording() -> dict[str, Any]:
    """A clean recording R holding every kind of field the table reads."""
    return {
        "format": 1,
        "run_id": "run-57",
        "step": 47,
        "state_digest": "state-47",
        "observations": [
            {"step": 3, "source": "clock", "payload_digest": "c3", "pinned_at": 100.0},
            {"step": 12, "source": "read_config", "payload_digest": "cfg-v1", "pinned_at": 101.5},
            {"step": 30, "source": "search", "payload_digest": "s30", "pinned_at": 102.0},
        ],
        "tokens": [
            {"seq": 0, "kind": "rng", "value": 7, "provenance": "recorded"},
            {"seq": 1, "kind": "clock", "value": 1.5, "provenance": "recorded"},
            {"seq": 2, "kind": "tool", "value": {"rows": [1, "a"]}, "provenance": "recorded"},
            {"seq": 3, "kind": "custom-kind", "value": "s", "provenance": "recorded"},
            {"seq": 4, "kind": "env", "value": b"\x00raw", "provenance": "recorded"},
            {"seq": 5, "kind": "rng", "value": None, "provenance": "recorded"},
        ],
        "call_graph": [
            {"step": 1, "node": "plan"},
            {"step": 12, "node": "read_config", "version": 1},
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


def replay_of(doc: Mapping[str, Any]) -> dict[str, Any]:
    """A faithful STRICT replay of ``doc``."""
    out = copy.deepcopy(dict(doc))
    out["mode"] = "strict"
    return out


# -- the reference table ----------------------------------------------------------


def _canon(value: Any) -> bytes:
    return bytes(encode_value(value))


def _first_difference(a: Sequence[Any], b: Sequence[Any], key: Callable[[Any], Any]) -> int | None:
    for i in range(min(len(a), len(b))):
        if key(a[i]) != key(b[i]):
            return i
    return None if len(a) == len(b) else min(len(a), len(b))


def _pin(o: Mapping[str, Any]) -> float | None:
    return None if o["pinned_at"] is None else float(o["pinned_at"])


def _obs_key(o: Mapping[str, Any]) -> tuple[Any, ...]:
    return (o["step"], o["source"], o["payload_digest"])


def _token_key(t: Mapping[str, Any]) -> tuple[Any, ...]:
    return (t["seq"], t["kind"], _canon(t["value"]))


def spec_findings(r: Mapping[str, Any], p: Mapping[str, Any]) -> Located:
    """Every finding the table's rows give for R ``r`` and P ``p``, located."""
    out: Located = {}
    if r["run_id"] != p["run_id"]:
        out[("RUN_MISMATCH", "both")] = (None, "")
    if r["step"] != p["step"]:
        out[("STEP_MISMATCH", "both")] = (p["step"], "step")
    tags = [i for i, t in enumerate(r.get("provenance_tags", [])) if t.startswith("replay:")]
    if tags:
        out[("REPLAY_OF_REPLAY", "recorded")] = (tags[0], "index")
    if r["state_digest"] != p["state_digest"]:
        out[("STATE_MISMATCH", "both")] = (r["step"], "step")
    # Tokens: the first position where seq, kind or value differ; a count difference.
    rt, pt = r["tokens"], p["tokens"]
    i = _first_difference(rt, pt, _token_key)
    if i is not None and i < min(len(rt), len(pt)):
        # The stream position: the seq a well-formed log holds there (audit57).
        out[("TOKEN_MISMATCH", "both")] = (i, "seq")
    if len(rt) != len(pt):
        out[("TOKEN_COUNT", "both")] = (min(len(rt), len(pt)), "index")
    for side, doc in (("recorded", r), ("replayed", p)):
        live = [k for k, t in enumerate(doc["tokens"]) if t["provenance"] != "recorded"]
        if live:  # its stream position, not the seq its record claims (audit68)
            out[("LIVE_RESOLUTION", side)] = (live[0], "seq")
    breaks = [k for k, t in enumerate(rt) if t["seq"] != k]
    if breaks:
        out[("TOKEN_SEQUENCE", "recorded")] = (breaks[0], "index")
    # Call graph: the first index where the decisions differ.
    rc, pc = r["call_graph"], p["call_graph"]
    i = _first_difference(rc, pc, _canon)
    if i is not None:
        out[("CALL_GRAPH_MISMATCH", "both")] = (i, "index")
    # Observations: the first position where (step, source, payload_digest) differ,
    # located at the earlier of the two steps there.
    ro, po = r["observations"], p["observations"]
    i = _first_difference(ro, po, _obs_key)
    if i is not None:
        steps = [o[i]["step"] for o in (ro, po) if i < len(o)]
        out[("OBSERVATION_MISMATCH", "both")] = (min(steps), "step")
    nulls = [o for o in ro if o["pinned_at"] is None]
    if nulls:
        out[("UNPINNED_OBSERVATION", "recorded")] = (nulls[0]["step"], "step")
    bad = [
        k
        for k, o in enumerate(po)
        if o["pinned_at"] is None
        or (
            k < len(ro)
            and _obs_key(ro[k]) == _obs_key(o)
            and _pin(ro[k]) is not None
            and _pin(ro[k]) != _pin(o)
        )
    ]
    if bad:
        out[("UNPINNED_OBSERVATION", "replayed")] = (po[bad[0]]["step"], "step")
    # Effects: P's i-th attempt must be R's i-th ledger entry; located at that entry.
    re_, pe = r["effects"], p["effects"]
    wrong = [k for k, e in enumerate(pe) if k >= len(re_) or re_[k] != e]
    if wrong:
        out[("UNRECORDED_EFFECT", "replayed")] = (wrong[0], "seq")
    if not r.get("ledger_sealed", False):
        out[("LEDGER_UNSEALED", "recorded")] = (None, "")
    if r.get("mode") == "best_effort":
        out[("BEST_EFFORT", "recorded")] = (None, "")
    if p.get("mode") != "strict":
        out[("BEST_EFFORT", "replayed")] = (None, "")
    if p.get("harness_accesses"):
        out[("HARNESS_PERTURBATION", "replayed")] = (0, "index")
    if r["transcript_digest"] != p["transcript_digest"]:
        out[("TRANSCRIPT_MISMATCH", "both")] = (None, "")
    return out


def spec_verdict(found: Located) -> str:
    if any(code in REJECT_CODES for code, _ in found):
        return "REJECT"
    return "QUARANTINE" if found else "ACCEPT"


# -- the mutations ----------------------------------------------------------------

DROP = object()  # a field value meaning "remove the key"


@dataclass(frozen=True)
class Mutation:
    """One change to one side: ``path`` is a top-level field (``step``), an item
    (``tokens[2]``) or an item's field (``tokens[2].kind``); ``op`` names the change."""

    side: str  # "R" or "P"
    path: str
    op: str
    value: Any = None

    @property
    def ident(self) -> str:
        return f"{self.side}:{self.path}:{self.op}"

    def apply(self, doc: Mapping[str, Any]) -> dict[str, Any]:
        out = copy.deepcopy(dict(doc))
        head, _, leaf = self.path.partition(".")
        name, _, index = head.partition("[")
        if not index:  # a top-level field
            if self.value is DROP:
                out.pop(name, None)
            else:
                out[name] = copy.deepcopy(self.value)
            return out
        items = out[name]
        i = int(index.rstrip("]"))
        if leaf:
            if self.value is DROP:
                del items[i][leaf]
            else:
                items[i][leaf] = copy.deepcopy(self.value)
        elif self.op == "drop":
            del items[i]
        elif self.op == "duplicate":
            items.insert(i, copy.deepcopy(items[i]))
        elif self.op == "swap":
            items[i], items[i + 1] = items[i + 1], items[i]
        elif self.op == "extra_key":
            items[i]["zz_extra"] = 1
        elif self.op == "append":
            items.insert(i + 1, copy.deepcopy(self.value))
        else:
            raise ValueError(self.op)
        return out


#: Item fields per list (every one is identity or evidence).
ITEM_FIELDS = {
    "observations": ("step", "source", "payload_digest", "pinned_at"),
    "tokens": ("seq", "kind", "value", "provenance"),
    "call_graph": ("step", "node", "version"),
    "effects": ("seq", "target", "payload_digest"),
}


def _changes(value: Any) -> list[tuple[str, Any]]:
    """The small mutation set for one value: one byte/value changed, a type change,
    empty, null, dropped."""
    out: list[tuple[str, Any]] = []
    if isinstance(value, bool):
        out += [("flip", not value), ("to_int", int(value)), ("to_str", str(value).lower())]
    elif isinstance(value, int):
        out += [("plus_one", value + 1), ("to_str", str(value)), ("to_float", float(value))]
        out += [("to_bool", bool(value))]
    elif isinstance(value, float):
        out += [("plus_half", value + 0.5), ("to_str", repr(value)), ("to_int", int(value))]
    elif isinstance(value, str):
        flipped = value[:-1] + chr(ord(value[-1]) ^ 1) if value else "x"
        out += [("one_byte", flipped), ("empty", ""), ("to_bytes", value.encode())]
        out += [("to_int", 1)]
    elif isinstance(value, bytes):
        out += [("one_byte", value[:-1] + bytes([value[-1] ^ 1])), ("empty", b"")]
        out += [("to_str", value.decode("latin-1"))]
    elif isinstance(value, list):
        out += [("empty", []), ("extra", [*value, "x"]), ("to_str", repr(value))]
    elif isinstance(value, dict):
        out += [("empty", {}), ("extra", {**value, "zz": 1}), ("to_str", repr(value))]
    if value is not None:
        out.append(("to_null", None))
    else:
        out += [("set_str", "x"), ("set_int", 0)]
    out.append(("drop", DROP))
    return out


#: Values a field can take that the table gives a meaning to (besides _changes).
SEMANTIC: dict[str, list[tuple[str, Any]]] = {
    "mode": [("best_effort", "best_effort"), ("strict", "strict")],
    "ledger_sealed": [("false", False)],
    "provenance_tags": [
        ("replay_tag", ["agent:v1", "replay:0123"]),
        ("replay_tag_first", ["replay:0123"]),
        ("other_tag", ["agent:v2"]),
    ],
    "harness_accesses": [("one_access", [{"resource": "cache", "n": 1}]), ("null_access", [None])],
    "provenance": [("live", "live")],
}

TOP_LEVEL = (
    "format",
    "run_id",
    "step",
    "state_digest",
    "transcript_digest",
    "mode",
    "ledger_sealed",
    "harness_accesses",
    "provenance_tags",
)


def mutations(base: Mapping[str, Any]) -> Iterator[Mutation]:
    """Every mutation of every field of ``base`` on either side, in a fixed order."""
    for side in ("R", "P"):
        for name in TOP_LEVEL:
            for op, value in [*_changes(base[name]), *SEMANTIC.get(name, [])]:
                yield Mutation(side, name, op, value)
        for name, fields in ITEM_FIELDS.items():
            items = base[name]
            for i, item in enumerate(items):
                for leaf in fields:
                    if leaf not in item:
                        continue
                    for op, value in [*_changes(item[leaf]), *SEMANTIC.get(leaf, [])]:
                        yield Mutation(side, f"{name}[{i}].{leaf}", op, value)
                for op in ("drop", "duplicate", "extra_key"):
                    yield Mutation(side, f"{name}[{i}]", op)
                if i + 1 < len(items):
                    yield Mutation(side, f"{name}[{i}]", "swap")
            extra = copy.deepcopy(items[-1])
            if name == "tokens":
                extra["seq"] = len(items)
            yield Mutation(side, f"{name}[{len(items) - 1}]", "append", extra)
            yield Mutation(side, name, "empty", [])


def apply(m: Mutation, r: Mapping[str, Any], p: Mapping[str, Any]) -> tuple[Any, Any]:
    return (m.apply(r), p) if m.side == "R" else (r, m.apply(p))


def spec_fidelity(
    r: Mapping[str, Any], p: Mapping[str, Any], found: Located
) -> tuple[str, tuple[tuple[int, tuple[str, ...], tuple[str, ...]], ...]]:
    """Seed 004's class (docs/decision-table.md, "Fidelity", rows top to bottom) and
    the recording gaps: (step, sources unpinned there in R or P, sources only P read)."""
    codes = {code for code, _ in found}
    if not found:
        return "FAITHFUL", ()
    cg, tr = "CALL_GRAPH_MISMATCH" in codes, "TRANSCRIPT_MISMATCH" in codes
    if cg and tr:
        i = _first_difference(r["call_graph"], p["call_graph"], _canon)
        assert i is not None
        step = min(g[i]["step"] for g in (r["call_graph"], p["call_graph"]) if i < len(g))
        at = [o for o in (*r["observations"], *p["observations"]) if o["step"] == step]
        unpinned = tuple(sorted({o["source"] for o in at if o["pinned_at"] is None}))
        recorded = {o["source"] for o in r["observations"] if o["step"] == step}
        only_p = {o["source"] for o in p["observations"] if o["step"] == step} - recorded
        return "DIVERGENT_CAUSAL", ((step, unpinned, tuple(sorted(only_p))),)
    none = r["transcript_digest"] is None and p["transcript_digest"] is None
    if "HARNESS_PERTURBATION" in codes or (cg and not tr and not none):
        return "DIVERGENT_PERTURBED", ()
    return "UNVERIFIED", ()
