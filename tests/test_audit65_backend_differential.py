"""LMDB and PostgreSQL, side by side: the same generated operations, the same answers.

A hypothesis state machine applies one random sequence of public-API calls to
an LMDB store (a tmp folder) and a PostgreSQL store (a new schema of the
suite's real cluster, tests/pg_cluster.py) in lockstep and compares every
observable result: checkpoint ids (content-addressed), refs, forks, rollbacks
(``reset_ref``), retained heads, ``prune``/``gc``/``delete_run`` reports,
histories, states, name resolution, recorded decisions and the gates, the
audit log, ``verify()`` and the engine-neutral ``stats``; for bad input, the
same exception class with the same ``where``/``expected``/``got``. The clock
and the decision nonce are fixed per step, so audit digests match too.
A small model (the ids written, the decisions, sign-offs and permits made) drives the choices.

After every 5th sequence (CLI_EVERY), with both handles closed, a handful of CLI
commands (``log``, ``inspect``, ``audit``, ``verify``, ``gc --dry-run``,
``retained``, ``stats``, each with ``--json``, some of them errors) must print
the same on both stores.

It tolerates exactly the engine differences docs/store.md lists ("PostgreSQL
backend", "Engine differences"): the store's location (replaced by ``<store>``),
the file figures (ENGINE_STATS), and LMDB's one mode per store per process (the
handles are closed before the CLI opens the stores read-only;
test_audit65_engine_differences.py pins it). The CI run is derandomized, 30
sequences of 25 steps; a local hunt: A65_RANDOM=1 (a random seed), A65_N (how
many sequences), A65_NOSHRINK=1, A65_CLI_EVERY=1, A65_DURABILITY=batched.
"""

from __future__ import annotations

import contextlib
import dataclasses
import importlib
import io
import json
import os
import tempfile
import types
from collections.abc import Callable, Iterator
from typing import Any, ClassVar

import pytest
from hypothesis import HealthCheck, Phase, settings
from hypothesis import strategies as st
from hypothesis.stateful import (
    RuleBasedStateMachine,
    initialize,
    invariant,
    precondition,
    rule,
    run_state_machine_as_test,
)
from pg_cluster import fresh_url, pg_cluster  # noqa: F401 - fixture

import cpstore
from cpstore import cli
from cpstore.errors import CpstoreError
from cpstore.store import backend_base
from cpstore.store.stats import store_stats

gates_mod = importlib.import_module("cpstore.decision.gates")
validate_mod = importlib.import_module("cpstore.decision.validate")

RUNS = ("r1", "r2", "r3")
BRANCHES = ("main", "b1", "b2")
BAD_NAMES = ("", "a\0b", "x" * 201, "\ud800")

#: stats fields that measure the engine's files, not the store's content.
ENGINE_STATS = {
    "file_bytes",
    "free_bytes",
    "disk_bytes",
    "reusable_bytes",
    "map_size",
    "used_bytes",
    "file_bytes_before",
    "file_bytes_after",
    "reusable_bytes_before",
    "reusable_bytes_after",
}


def _drop_engine(value: Any) -> Any:
    if isinstance(value, dict):
        return {k: _drop_engine(v) for k, v in value.items() if k not in ENGINE_STATS}
    if isinstance(value, list):
        return [_drop_engine(v) for v in value]
    return value


def _flushed(store: cpstore.Store) -> tuple[None, int]:
    """Flush ``store``; what the differential compares: (None, checkpoints still queued)."""
    store.flush()
    return None, store.pending


class Clock:
    """The time every record is stamped with: fixed within a step, so both stores get it."""

    def __init__(self) -> None:
        self.t = 1_800_000_000.0

    def time(self) -> float:
        return self.t

    def tick(self) -> None:
        self.t += 1.5

    def token_bytes(self, k: int) -> bytes:
        return int(self.t * 2).to_bytes(k, "big")  # fixed within a step, as the time


def norm(value: Any, paths: tuple[str, ...]) -> Any:
    """``value`` as plain data, each store path replaced by ``<store>``."""
    if dataclasses.is_dataclass(value) and not isinstance(value, type):
        return {
            f.name: norm(getattr(value, f.name), paths)
            for f in dataclasses.fields(value)
            if not f.name.startswith("_")
        }
    if hasattr(value, "to_dict") and callable(value.to_dict):
        return norm(value.to_dict(), paths)
    if isinstance(value, dict):
        return {norm(k, paths): norm(v, paths) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [norm(v, paths) for v in value]
    if isinstance(value, (bytes, bytearray, memoryview)):
        return bytes(value)
    if isinstance(value, str):
        for p in paths:
            value = value.replace(p, "<store>")
        return value
    if hasattr(value, "name") and hasattr(value, "value"):  # an Enum
        return f"{type(value).__name__}.{value.name}"
    return value


@dataclasses.dataclass
class Outcome:
    value: Any = None
    error: BaseException | None = None


def attempt(fn: Callable[[], Any]) -> Outcome:
    try:
        return Outcome(value=fn())
    except CpstoreError as exc:
        return Outcome(error=exc)


class Differential(RuleBasedStateMachine):
    """The same operations on both engines; every answer compared."""

    clock: Clock

    def __init__(self) -> None:
        super().__init__()
        self.folder = tempfile.TemporaryDirectory(prefix="audit65-")
        self.url = fresh_url()
        mode = os.environ.get("A65_DURABILITY", "sync")  # a local hunt may try "batched"
        self.lm = cpstore.open(self.folder.name + "/store", durability=mode)  # type: ignore[arg-type]
        self.pg = cpstore.open(self.url, durability=mode)  # type: ignore[arg-type]
        self.paths = (self.lm.path, self.pg.path, self.folder.name + "/store", self.url)
        self.ids: list[str] = []
        self.decisions: list[tuple[str, str, str]] = []  # (audit digest, checkpoint, verdict)
        self.signoffs: list[str] = []
        self.permits: dict[str, str] = {}  # checkpoint -> permit digest

    def teardown(self) -> None:
        for s in (self.lm, self.pg):
            s.close()  # closed first: the CLI opens LMDB read-only, which this process refuses
        self.folder.cleanup()  # beside a writable handle (the registry: one mode per folder)

    # -- comparing -------------------------------------------------------------

    def both(self, call: Callable[[cpstore.Store], Any], what: str) -> Any:
        """``call`` on each store; the answers (or errors) must match. Returns LMDB's value."""
        self.clock.tick()
        a = attempt(lambda: call(self.lm))
        b = attempt(lambda: call(self.pg))
        self.same(a, b, what)
        return a

    def same(self, a: Outcome, b: Outcome, what: str) -> None:
        if a.error is not None or b.error is not None:
            assert type(a.error) is type(b.error), (what, a.error, b.error)
            assert a.error is not None and b.error is not None
            fa = [norm(getattr(a.error, f, None), self.paths) for f in ("where", "expected", "got")]
            fb = [norm(getattr(b.error, f, None), self.paths) for f in ("where", "expected", "got")]
            assert fa == fb, (what, a.error, b.error)
            return
        assert norm(a.value, self.paths) == norm(b.value, self.paths), (what, a.value, b.value)

    # -- rules -------------------------------------------------------------------

    @initialize()
    def start(self) -> None:
        """Two runs to work on: r1 with a sealed ledger and a fork, r2 with one checkpoint."""
        first = {"tokens": [("rng", 1)], "effects": [b"e"], "observe": True, "seal": True}
        self.record(run="r1", branch="main", steps=2, parent=None, state={"a": 1}, **first)
        second = {"tokens": [("llm", 2)], "effects": [], "observe": False, "seal": False}
        self.record(run="r2", branch="main", steps=1, parent=None, state={"b": 2}, **second)
        self.fork("r1", "b1", 0)

    RECORD: ClassVar[dict[str, Any]] = {
        "run": st.sampled_from(RUNS),
        "branch": st.sampled_from(BRANCHES),
        "steps": st.integers(1, 2),
        "tokens": st.lists(
            st.tuples(st.sampled_from(["rng", "clock", "llm"]), st.integers(0, 9)), max_size=3
        ),
        "effects": st.lists(st.binary(max_size=4), max_size=2),
        "observe": st.booleans(),
        "seal": st.booleans(),
        "parent": st.none() | st.integers(0, 50),
        "state": st.dictionaries(st.sampled_from(["a", "b", "mem"]), st.integers(0, 3), max_size=3),
    }

    @rule(**RECORD)
    def record(
        self,
        *,
        run: str,
        branch: str,
        steps: int,
        tokens: list[tuple[str, int]],
        effects: list[bytes],
        observe: bool,
        seal: bool,
        parent: int | None,
        state: dict[str, int],
    ) -> None:
        par = self.ids[parent % len(self.ids)] if parent is not None and self.ids else None
        permit = self.permits.get(par or "") if par else None

        def go(s: cpstore.Store) -> list[str]:
            head = s.ref(run, branch)
            use = permit if head is None else self.permits.get(head)
            rec = s.recorder(run, branch=branch, parent=par if head is None else None, permit=use)
            out = []
            try:
                for step in range(1, steps + 1):
                    for kind, v in tokens:
                        rec.token(kind, v)
                    if observe:
                        rec.observe(step, "src", b"obs%d" % step, pinned_at=1.0)
                    for e in effects:
                        rec.effect("crm", e)
                    rec.decision(step, {"node": f"n{step}"})
                    out.append(rec.checkpoint(step, {**state, "step": step}, seal_ledger=seal))
            finally:
                rec.close(discard_effects=True)
            return out

        out = self.both(go, "record")
        if out.value:
            self.ids.extend(i for i in out.value if i not in self.ids)

    @rule(**RECORD)
    def record_more(self, **kw: Any) -> None:
        """Recording again (hypothesis picks among rules evenly: this doubles their share)."""
        self.record(**kw)

    @precondition(lambda self: self.ids)
    @rule(run=st.sampled_from(RUNS), branch=st.sampled_from(BRANCHES), i=st.integers(0, 50))
    def fork(self, run: str, branch: str, i: int) -> None:
        cid = self.ids[i % len(self.ids)]
        self.both(lambda s: s.fork(run, branch, cid), "fork")

    @rule(
        run=st.sampled_from(RUNS),
        branch=st.sampled_from(BRANCHES),
        i=st.none() | st.integers(0, 50),
    )
    def reset(self, run: str, branch: str, i: int | None) -> None:
        new = self.ids[i % len(self.ids)] if i is not None and self.ids else None
        self.both(
            lambda s: s.reset_ref(
                run, branch, new, expected_old=s.ref(run, branch), operator="op", reason="test"
            ),
            "reset_ref",
        )

    @precondition(lambda self: self.ids)
    @rule(run=st.sampled_from(RUNS), branch=st.sampled_from(BRANCHES), i=st.integers(0, 50))
    def move(self, run: str, branch: str, i: int) -> None:
        """set_ref: forward only (NotDescendantError otherwise), CAS on the current head."""
        new = self.ids[i % len(self.ids)]
        self.both(lambda s: s.set_ref(run, branch, new, expected_old=s.ref(run, branch)), "set_ref")

    @rule()
    def flush(self) -> None:
        self.both(_flushed, "flush")

    @rule(i=st.integers(0, 50))
    def release(self, i: int) -> None:
        held = sorted(self.lm.retained())
        cid = held[i % len(held)] if held else "0" * 32
        self.both(lambda s: s.release_retained(cid, operator="op", reason="done"), "release")

    @rule(keep=st.integers(1, 3), run=st.none() | st.sampled_from(RUNS))
    def prune(self, keep: int, run: str | None) -> None:
        self.both(lambda s: s.prune(keep_last=keep, run_id=run), "prune")

    @precondition(lambda self: len(self.ids) >= 5)
    @rule(keep=st.none() | st.integers(1, 3), run=st.sampled_from(RUNS), dry=st.booleans())
    def gc(self, keep: int | None, run: str, dry: bool) -> None:
        if keep is None:
            self.both(lambda s: s.gc(delete_run=run, dry_run=dry), "gc delete_run")
        else:
            self.both(lambda s: s.gc(keep_last=keep, run_id=run, dry_run=dry), "gc keep_last")

    @precondition(lambda self: len(self.ids) >= 5)
    @rule(run=st.sampled_from(RUNS))
    def delete_run(self, run: str) -> None:
        self.both(lambda s: s.delete_run(run), "delete_run")

    @precondition(lambda self: self.ids)
    @rule(i=st.integers(0, 50), j=st.integers(0, 50))
    def validate(self, i: int, j: int) -> None:
        r, p = self.ids[i % len(self.ids)], self.ids[j % len(self.ids)]
        out = self.both(lambda s: cpstore.validate(r, p, store=s, record=True), "validate")
        d = out.value
        if d is not None and d.audit_digest:
            self.decisions.append((d.audit_digest, p, d.verdict.name))

    @precondition(lambda self: self.decisions)
    @rule(i=st.integers(0, 50))
    def sign(self, i: int) -> None:
        digest, _cid, _ = self.decisions[i % len(self.decisions)]
        out = self.both(
            lambda s: cpstore.sign_off(s, digest, operator="op", reason="ok"), "sign_off"
        )
        if out.value is not None:
            self.signoffs.append(out.value.audit_digest)

    @precondition(lambda self: self.decisions)
    @rule(i=st.integers(0, 50), k=st.none() | st.integers(0, 50), other=st.booleans())
    def gate(self, i: int, k: int | None, other: bool) -> None:
        digest, cid, _ = self.decisions[i % len(self.decisions)]
        if other and self.ids:
            cid = self.ids[i % len(self.ids)]
        so = self.signoffs[k % len(self.signoffs)] if k is not None and self.signoffs else None
        out = self.both(lambda s: cpstore.resume_gate(s, cid, digest, sign_off=so), "resume_gate")
        if out.value is not None:
            self.permits[cid] = out.value.audit_digest
        self.both(lambda s: cpstore.certify_rollback(s, cid, digest), "certify_rollback")

    @rule(
        i=st.integers(0, 50),
        how=st.sampled_from(["full", "prefix", "short", "ref", "tilde", "junk", "upper"]),
        n=st.integers(0, 4),
        run=st.sampled_from(RUNS),
        branch=st.sampled_from(BRANCHES),
    )
    def resolve(self, i: int, how: str, n: int, run: str, branch: str) -> None:
        cid = self.ids[i % len(self.ids)] if self.ids else "ab" * 16
        name = {
            "full": cid,
            "prefix": cid[: 8 + n],
            "short": cid[:7],
            "ref": f"{run}@{branch}",
            "tilde": f"{run}@{branch}~{n}",
            "junk": f"{run}@{branch}~x",
            "upper": cid.upper(),
        }[how]
        self.both(lambda s: s.resolve(name), f"resolve {how}")

    @rule(
        bad=st.sampled_from(BAD_NAMES),
        op=st.sampled_from(["recorder", "latest", "history", "prune", "delete_run", "fork", "ref"]),
    )
    def bad_input(self, bad: str, op: str) -> None:
        calls: dict[str, Callable[[cpstore.Store], Any]] = {
            "recorder": lambda s: s.recorder(bad),
            "latest": lambda s: s.latest("r1", bad).__enter__(),
            "history": lambda s: s.history(bad),
            "prune": lambda s: s.prune(keep_last=1, run_id=bad),
            "delete_run": lambda s: s.delete_run(bad),
            "fork": lambda s: s.fork(bad, "main", "00" * 16),
            "ref": lambda s: s.ref(bad),
        }
        self.both(calls[op], f"bad {op}")

    @rule(
        keep=st.sampled_from([0, -1, True, 1.5]),
        cid=st.sampled_from(["", "zz", "0" * 31, "0" * 32]),
    )
    def bad_values(self, keep: Any, cid: str) -> None:
        self.both(lambda s: s.prune(keep_last=keep), "bad keep_last")
        self.both(lambda s: s.gc(keep_last=keep), "bad gc keep_last")
        self.both(lambda s: s.read(cid).__enter__(), "bad read")
        self.both(lambda s: s.history_states("nope"), "no such run")
        self.both(lambda s: s.set_ref("r1", "main", cid, expected_old=None), "bad set_ref")
        self.both(lambda s: s.history("r1", limit=keep), "bad history limit")
        self.both(lambda s: s.runs(limit=keep), "bad runs limit")
        self.both(lambda s: s.gc(keep_last=1, delete_run="r1"), "gc both")
        self.both(lambda s: s.gc(), "gc neither")
        self.both(lambda s: s.get_object(cid), "bad get_object")
        self.both(lambda s: s.has_object(cid), "bad has_object")
        self.both(lambda s: s.unpin_object(cid), "bad unpin_object")
        self.both(lambda s: s.verify_checkpoint(cid), "bad verify_checkpoint")
        self.both(lambda s: s.manifest(cid), "bad manifest")
        self.both(lambda s: s.release_retained(cid, operator="", reason="x"), "bad release")

    @precondition(lambda self: self.ids)
    @rule(i=st.integers(0, 50), data=st.binary(max_size=8))
    def objects(self, i: int, data: bytes) -> None:
        """put/has/get/unpin of a pinned object; a recorder whose parent is not the head."""
        out = self.both(lambda s: str(s.put_object(data)), "put_object")
        digest = out.value
        self.both(lambda s: (s.has_object(digest), s.get_object(digest)), "get_object")
        self.both(lambda s: s.unpin_object(digest), "unpin_object")
        self.both(lambda s: s.unpin_object(digest), "unpin_object again")
        cid = self.ids[i % len(self.ids)]
        self.both(lambda s: s.recorder("r1", parent=cid).close(), "recorder parent")

    # -- what is compared after every step ---------------------------------------

    @invariant()
    def refs_and_log_read_the_same(self) -> None:
        self.both(lambda s: s.runs(), "runs")
        self.both(lambda s: {r: s.branches(r) for r in RUNS}, "branches")
        self.both(lambda s: s.retained(), "retained")
        self.both(lambda s: list(s.audit_records()), "audit_records")

    @rule(run=st.sampled_from(RUNS), branch=st.sampled_from(BRANCHES), i=st.integers(0, 50))
    def look(self, run: str, branch: str, i: int) -> None:
        self.read_branch(run, branch)
        if self.ids:
            self.read_checkpoint(self.ids[i % len(self.ids)])

    def read_branch(self, run: str, branch: str) -> None:
        self.both(lambda s: s.history(run, branch), f"history {run}@{branch}")
        self.both(lambda s: s.history(run, branch, limit=2), f"history {run}@{branch}")
        self.both(
            lambda s: [(e.manifest, e.state) for e in s.history_states(run, branch)],
            f"history_states {run}@{branch}",
        )
        self.both(lambda s: _latest(s, run, branch), f"latest {run}@{branch}")

    def read_checkpoint(self, cid: str) -> None:
        self.both(lambda s: _view(s, cid), f"read {cid}")
        self.both(lambda s: s.verify_checkpoint(cid), f"verify_checkpoint {cid}")

    def check_whole(self) -> None:
        for run in RUNS:
            for branch in self.lm.branches(run):
                self.read_branch(run, branch)
        for cid in self.ids:
            self.read_checkpoint(cid)
        self.both(lambda s: s.verify(), "verify")
        self.both(_neutral_stats, "stats")


def _view_fields(cp: Any) -> dict[str, Any]:
    return {
        "id": cp.id,
        "manifest": cp.manifest,
        "state": cp.state(),
        "tokens": [cp.token(i) for i in range(cp.token_count())],
        "observations": cp.observations(),
        "effects": cp.effects(),
        "effect_payloads": [cp.effect_payload(seq) for seq, _t, _d in cp.effects()],
    }


def _latest(s: cpstore.Store, run: str, branch: str) -> dict[str, Any]:
    with s.latest(run, branch) as cp:
        return _view_fields(cp)


def _view(s: cpstore.Store, cid: str) -> dict[str, Any]:
    with s.read(cid) as cp:
        return _view_fields(cp)


def _neutral_stats(s: cpstore.Store) -> dict[str, Any]:
    data = norm(store_stats(s), ())
    return {k: v for k, v in data.items() if k not in ENGINE_STATS}


@contextlib.contextmanager
def fixed_clock(monkeypatch: pytest.MonkeyPatch) -> Iterator[Clock]:
    """Every record stamp and decision nonce from ``Clock``: both stores write the same bytes."""
    clock = Clock()
    shim = types.SimpleNamespace(time=clock.time)
    monkeypatch.setattr(gates_mod, "time", shim)
    monkeypatch.setattr(validate_mod, "time", shim)
    monkeypatch.setattr(
        validate_mod, "secrets", types.SimpleNamespace(token_bytes=clock.token_bytes)
    )
    monkeypatch.setattr(backend_base, "time", shim)
    yield clock


def _cli(argv: list[str]) -> tuple[int, str]:
    out, err = io.StringIO(), io.StringIO()
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
        code = cli.main(argv)
    return code, out.getvalue() + err.getvalue()


def cli_outputs(
    machine: Differential, branches: dict[str, dict[str, str]]
) -> list[tuple[str, Any, Any]]:
    """Each CLI command's (exit code, output) on both stores, the path replaced."""
    found = []
    lm_path, pg_url = machine.folder.name + "/store", machine.url
    commands: list[list[str]] = [
        ["log"],
        ["audit"],
        ["audit", "--check"],
        ["audit", "--kind", "decision", "--start", "1", "--limit", "2"],
        ["verify"],
        ["retained"],
        ["stats"],
        ["inspect", "deadbeef"],
        ["inspect", "r1@main~9"],
        ["log", "nope"],
        ["log", "r1", "--branch", "nope"],
    ]
    for run in RUNS:
        commands.append(["log", run])
        for branch in branches[run]:
            commands.append(["log", run, "--branch", branch, "--limit", "3"])
        commands.append(["gc", "--delete-run", run, "--dry-run"])
    commands.append(["gc", "--keep-last", "1", "--dry-run"])
    for cid in machine.ids[-3:]:
        commands.append(["inspect", cid])
        commands.append(["inspect", cid[:10]])
    for argv in commands:
        outs = []
        for where in (lm_path, pg_url):
            code, text = _cli([*argv, "--store", where, "--json"])
            text = norm(text, machine.paths)
            with contextlib.suppress(ValueError):
                text = _drop_engine(json.loads(text))
            outs.append((code, text))
        found.append((" ".join(argv), outs[0], outs[1]))
    return found


#: The CLI differential runs after every CLI_EVERY-th sequence (the first included).
CLI_EVERY = int(os.environ.get("A65_CLI_EVERY", "5"))

SETTINGS = settings(
    max_examples=int(os.environ.get("A65_N", "30")),
    stateful_step_count=25,
    derandomize=not os.environ.get("A65_RANDOM"),
    deadline=None,
    database=None,
    suppress_health_check=list(HealthCheck),
    phases=[Phase.explicit, Phase.reuse, Phase.generate]
    if os.environ.get("A65_NOSHRINK")
    else list(Phase),
)


def test_both_engines_answer_every_generated_sequence_the_same(
    pg_cluster: Any,  # noqa: F811 - fixture
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """Every step's answers, and at each run's end verify(), stats and the CLI, agree."""
    made = [0]
    with fixed_clock(monkeypatch) as clock:

        class Machine(Differential):
            def __init__(self) -> None:
                self.clock = clock
                super().__init__()

            def teardown(self) -> None:
                try:
                    self.check_whole()
                    branches = {r: self.lm.branches(r) for r in RUNS}
                    for s in (self.lm, self.pg):
                        s.close()
                    made[0] += 1
                    if (made[0] - 1) % CLI_EVERY:  # the CLI takes ~1 s a sequence: every 5th
                        return
                    for what, a, b in cli_outputs(self, branches):
                        assert a == b, (what, a, b)
                finally:
                    super().teardown()

        run_state_machine_as_test(Machine, settings=SETTINGS)
