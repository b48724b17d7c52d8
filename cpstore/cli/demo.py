"""``cpstore demo``: the main job, on an embedded LMDB store in a fresh folder.

A small deterministic tool-calling agent runs for thousands of steps against a
live "world" (a config service, a search tool with a cache, a clock, an RNG, a
CRM it writes to) while a :class:`~cpstore.Recorder` records every read,
token, decision and effect, checkpointing every few steps. The same agent is
then replayed through :class:`~cpstore.ReplaySession` under the faults the
three seed documents describe, and every replay is judged by the real
validator on the real store. Nothing in the table is scripted: change the
agent or a fault and the verdicts change with it (the world, the agent and the
faults: :mod:`cpstore.cli.demo_agent`).
"""

from __future__ import annotations

import argparse
import os
import random
import tempfile
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from cpstore.cli.demo_agent import Faults, RecordingIO, ReplayIO, World, _transcript, agent_step
from cpstore.cli.exit_codes import (
    EXIT_BAD_INPUT,
    EXIT_INTEGRITY,
    EXIT_OK,
    EXIT_UNAVAILABLE,
    exit_epilog,
)
from cpstore.decision.gates import certify_rollback, resume_gate, sign_off
from cpstore.decision.table import Decision
from cpstore.decision.validate import validate
from cpstore.errors import GateError, InvalidInputError
from cpstore.native.args import int_argument
from cpstore.native.state import state_digest
from cpstore.replay.session import ReplaySession
from cpstore.run.model import ReplayMode, Run
from cpstore.store.facade import Store
from cpstore.store.facade import open as open_store

__all__ = ["DemoReport", "ScenarioResult", "add_parser", "run_demo"]

RUN_ID = "support-agent"
BULK_RUN_ID = "bulk-replay"
CHECKPOINT_AT = 47  # seed 000: the checkpoint whose replay hid a stale config read
STALE_STEP = 12  # seed 000: the step whose read_config saw a newer config


# -- recording and replaying ------------------------------------------------------------


def record_run(store: Store, steps: int, every: int) -> dict[int, str]:
    """Record the agent for ``steps`` steps; checkpoint ids by step."""
    world = World()
    rec = store.recorder(RUN_ID)
    io = RecordingIO(rec, world)
    state: dict[str, Any] = {}
    out: list[str] = []
    checkpoints: dict[int, str] = {}
    for step in range(steps):
        agent_step(io, world, step, state, out)
        if step % every == CHECKPOINT_AT % every or step == steps - 1:
            rec.transcript(_transcript(out))
            checkpoints[step] = rec.checkpoint(step, state, metadata={"agent": "demo"})
    return checkpoints


def replay(store: Store, checkpoint_id: str, faults: Faults) -> tuple[Run, ReplayIO, int]:
    """Re-run the agent from step 0 to the checkpoint's step under ``faults``."""
    world = World(seed=99)  # a different live RNG: only the log can reproduce the run
    world.config_version = 2  # the config changed after the recording (seed 000)
    with store.read(checkpoint_id) as cp:
        last = cp.manifest.step
        session = ReplaySession(cp, mode=faults.mode)
        io = ReplayIO(session, world, faults)
        for _ in range(faults.harness_bumps):
            world.rate_limiter += 1
            session.harness_access({"resource": "rate_limiter", "op": "increment"})
        state: dict[str, Any] = {}
        out: list[str] = []
        for step in range(last + 1):
            agent_step(io, world, step, state, out)
            if step in faults.extra_effects:
                io.effect(step, *faults.extra_effects[step])
        run = io.finish(state, out)
        return run, io, len(run.tokens)


@dataclass(frozen=True)
class ScenarioResult:
    """One row of the demo's table."""

    name: str
    """What was replayed."""
    decision: Decision
    """The validator's decision (recorded in the audit log)."""
    seconds: float
    """Wall time of validate() alone."""
    tokens: int
    """Tokens compared."""
    stopped: int = 0
    """Effects the ledger guard stopped before they escaped."""


def _first(decision: Decision) -> str:
    if not decision.findings:
        return "-"
    f = decision.findings[0]
    where = f"{f.unit} {f.position}" if f.position is not None else ""
    return f"{f.code.value} {where}".strip()


def _scenario(store: Store, name: str, cid: str, faults: Faults) -> tuple[ScenarioResult, ReplayIO]:
    run, io, count = replay(store, cid, faults)
    start = time.perf_counter()
    decision = validate(cid, run, store=store)
    elapsed = time.perf_counter() - start
    return ScenarioResult(name, decision, elapsed, count, len(io.stopped)), io


def bulk(store: Store, count: int) -> tuple[ScenarioResult, float]:
    """Record ``count`` tokens, replay them through a cursor, validate from the store."""
    rec = store.recorder(BULK_RUN_ID)
    rng = random.Random(5)
    chunk = 100_000
    for start in range(0, count, chunk):
        n = min(chunk, count - start)
        rec.tokens(("rng", rng.getrandbits(32)) for _ in range(n))
    cid = rec.checkpoint(0, {"done": True})
    t0 = time.perf_counter()
    with store.read(cid) as cp:
        session = ReplaySession(cp)
        resolve = session.cursor.resolve
        for _ in range(count):
            resolve("rng")
        session.cursor.assert_fully_consumed()
        run = session.finish(state_digest({"done": True}))
    cursor_s = time.perf_counter() - t0
    t1 = time.perf_counter()
    decision = validate(cid, run, store=store)
    return ScenarioResult(
        "bulk replay, validated from the store", decision, time.perf_counter() - t1, count
    ), cursor_s


@dataclass(frozen=True)
class DemoReport:
    """Everything the demo measured (also printed)."""

    path: str
    """The store folder."""
    steps: int
    """Agent steps recorded."""
    checkpoints: int
    """Checkpoints written."""
    record_seconds: float
    """Wall time of the recording."""
    scenarios: tuple[ScenarioResult, ...]
    """The table."""
    gates: tuple[tuple[str, str], ...]
    """(what was asked, what the gate said)."""
    audit_records: int
    """Length of the audit log at the end."""
    verified: bool
    """Whether store.verify() passed (objects, references, audit chain)."""


def _gate(label: str, action: Callable[[], Any]) -> tuple[str, str]:
    try:
        result = action()
    except GateError as exc:
        return label, f"REFUSED: {exc.what}"
    return label, f"allowed ({type(result).__name__})"


def run_demo(
    path: str,
    *,
    steps: int = 2000,
    every: int = 5,
    bulk_tokens: int = 2_000_000,
    say: Callable[[str], None] = print,
) -> DemoReport:
    """Record, replay, validate and gate; returns what it measured."""
    if steps <= CHECKPOINT_AT:
        raise InvalidInputError(
            "the demo needs more steps", expected=f"> {CHECKPOINT_AT}", got=steps
        )
    with open_store(path) as store:
        say(f"store: {path} (LMDB, {store.durability} commits)")
        t0 = time.perf_counter()
        cps = record_run(store, steps, every)
        rec_s = time.perf_counter() - t0
        last_step = max(cps)
        with store.read(cps[last_step]) as cp:
            say(
                f"recorded {steps} steps of '{RUN_ID}' in {rec_s:.2f} s: {len(cps)} checkpoints, "
                f"{cp.token_count()} tokens, {len(cp.observations())} observations, "
                f"{len(cp.call_graph())} decisions, {len(cp.effects())} sealed effects"
            )
        tail = last_step - (last_step % 10) - 1  # an effect-free stretch after the last effect
        rows: list[ScenarioResult] = []
        ios: dict[str, ReplayIO] = {}

        def add(name: str, cid: str, faults: Faults) -> ScenarioResult:
            result, io = _scenario(store, name, cid, faults)
            rows.append(result)
            ios[name] = io
            return result

        # Each gate is asked right after its decision: a gate acts on the latest
        # decision about a checkpoint, so a later validation supersedes it.
        gates: list[tuple[str, str]] = []
        faithful = add("faithful replay (strict)", cps[last_step], Faults())
        gates.append(
            _gate(
                "resume from the faithful replay's checkpoint",
                lambda: resume_gate(store, cps[last_step], faithful.decision),
            )
        )
        gates.append(
            _gate(
                "certify rollback on the faithful STRICT replay",
                lambda: certify_rollback(store, cps[last_step], faithful.decision),
            )
        )
        stale = add(
            f"seed 000: stale config at step {STALE_STEP}, checkpoint {CHECKPOINT_AT}",
            cps[CHECKPOINT_AT],
            Faults(refetch={(STALE_STEP, "read_config")}),
        )
        gates.append(
            _gate(
                "resume after seed 000 without sign-off",
                lambda: resume_gate(store, cps[CHECKPOINT_AT], stale.decision),
            )
        )
        signed = sign_off(
            store,
            stale.decision,
            operator="oncall@example",
            reason="config v2 only changed an unused feature flag",
        )
        for label in (
            "resume after seed 000 with the operator's sign-off",
            "the same sign-off used a second time",
        ):
            gates.append(
                _gate(
                    label,
                    lambda: resume_gate(store, cps[CHECKPOINT_AT], stale.decision, sign_off=signed),
                )
            )
        evicted = add(
            "seed 002: evicted cache + RNG re-seeded, live",
            cps[last_step],
            Faults(
                live_tokens={(tail - tail % 5, "tool"), (tail, "rng")},
                extra_effects={last_step: ("search.cache_fill", b"live call result")},
                mode=ReplayMode.BEST_EFFORT,
            ),
        )
        gates.append(
            _gate(
                "certify rollback of the seed 002 (quarantined) branch",
                lambda: certify_rollback(store, cps[last_step], evicted.decision),
            )
        )
        unrecorded = add(
            "unrecorded effect, stopped before commit",
            cps[last_step],
            Faults(extra_effects={last_step: ("webhook.notify", b"replay says hi")}),
        )
        gates.append(
            _gate(
                "resume after the unrecorded effect without sign-off",
                lambda: resume_gate(store, cps[last_step], unrecorded.decision),
            )
        )
        branch = add(
            "seed 004: idempotent branch + harness counter",
            cps[last_step],
            Faults(flip_tool_at=last_step // 2, harness_bumps=1),
        )
        gates.append(
            _gate(
                "sign off the seed 004 call-graph divergence",
                lambda: sign_off(
                    store, branch.decision, operator="oncall@example", reason="looks fine"
                ),
            )
        )
        gates.append(
            _gate(
                "record on from the seed 004 (rejected) checkpoint",
                lambda: store.recorder(RUN_ID),
            )
        )
        big, cursor_s = bulk(store, bulk_tokens)
        rows.append(big)
        _print_table(rows, say)
        say(
            f"bulk: replayed {bulk_tokens:,} tokens through the STRICT cursor in {cursor_s:.2f} s "
            f"({cursor_s / bulk_tokens * 1e6:.2f} us/token), validated in "
            f"{big.seconds * 1e3:.1f} ms"
        )
        stopped = sum(r.stopped for r in rows)
        admitted = sum(len(io.s.guard.attempted) for io in ios.values()) - stopped
        say(
            f"ledger guard: {admitted} recorded effects admitted in replays, {stopped} "
            "unrecorded effect(s) stopped before they escaped"
        )
        say("")
        say("gates:")
        for label, outcome in gates:
            say(f"  {label:<55} {outcome}")
        report = store.verify()
        audit = sum(1 for _ in store.audit_records())
        say("")
        say(
            f"audit log: {audit} records, hash chain {'verified' if report.ok else 'BROKEN'}; "
            f"store verify: {'ok' if report.ok else f'{len(report.problems)} problem(s)'}"
        )
        say(f"inspect it: cpstore log --store {path}; cpstore audit --store {path} --check")
        return DemoReport(path, steps, len(cps), rec_s, tuple(rows), tuple(gates), audit, report.ok)


def _print_table(rows: list[ScenarioResult], say: Callable[[str], None]) -> None:
    head = (
        f"{'scenario':<58} {'verdict':<10} {'fidelity':<20} {'first divergence':<30} "
        f"{'time':>9} {'tokens/s':>10}"
    )
    say("")
    say(head)
    say("-" * len(head))
    for r in rows:
        rate = r.tokens / r.seconds if r.seconds > 0 else float("inf")
        say(
            f"{r.name:<58} {r.decision.verdict.name:<10} {r.decision.fidelity.value:<20} "
            f"{_first(r.decision):<30} {r.seconds * 1e3:>7.1f}ms {_rate(rate):>10}"
        )
    say("")
    for r in rows:
        if r.decision.findings:
            codes = ", ".join(sorted({f.code.value for f in r.decision.findings}))
            say(f"  {r.name}: {codes} ({r.decision.standing})")


def _rate(per_s: float) -> str:
    for unit, scale in (("G", 1e9), ("M", 1e6), ("k", 1e3)):
        if per_s >= scale:
            return f"{per_s / scale:.1f}{unit}"
    return f"{per_s:.0f}"


def _run(args: argparse.Namespace) -> int:
    for name in ("steps", "every", "tokens"):
        if getattr(args, name) < 1:
            raise InvalidInputError(f"--{name} must be >= 1", got=getattr(args, name))
    if args.path and os.path.exists(args.path) and not os.path.isdir(args.path):
        raise InvalidInputError("the demo needs a folder", where=args.path, got="a file")
    if args.path and os.path.exists(args.path) and os.listdir(args.path):
        raise InvalidInputError("the demo needs a fresh folder", where=args.path, got="not empty")
    path = args.path or tempfile.mkdtemp(prefix="cpstore-demo-")
    report = run_demo(path, steps=args.steps, every=args.every, bulk_tokens=args.tokens)
    return EXIT_OK if report.verified else EXIT_INTEGRITY


def add_parser(sub: Any) -> None:
    """Add ``cpstore demo``."""
    p = sub.add_parser(
        "demo",
        help="record, replay and validate an agent run (the main job)",
        description="Record an agent run into a fresh store, replay it from a checkpoint, "
        "validate the replay (decision table) and print what each step cost.",
        epilog=exit_epilog(EXIT_BAD_INPUT, EXIT_INTEGRITY, EXIT_UNAVAILABLE),
    )
    p.add_argument("--path", help="a fresh folder for the store (default: a new temp folder)")
    p.add_argument(
        "--steps",
        type=int_argument(1, 10**7),
        default=2000,
        help="agent steps to record (default 2000)",
    )
    p.add_argument(
        "--every",
        type=int_argument(1, 10**7),
        default=5,
        help="checkpoint every N steps (default 5)",
    )
    p.add_argument(
        "--tokens",
        type=int_argument(1, 10**8),
        default=2_000_000,
        help="tokens in the bulk validation (default 2,000,000)",
    )
    p.set_defaults(handler=_run)
