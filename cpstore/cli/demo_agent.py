"""``cpstore demo``'s world and agent (:mod:`cpstore.cli.demo` runs them).

The live "world" (a config service, a search tool, a clock, an RNG, a CRM it
writes to), the deterministic tool-calling agent's step, and the IO it acts
through: :class:`RecordingIO` on a :class:`~cpstore.Recorder` for the live run,
:class:`ReplayIO` on a :class:`~cpstore.ReplaySession` under the :class:`Faults`
the seed documents describe.
"""

from __future__ import annotations

import json
import random
from collections.abc import Callable
from dataclasses import dataclass, field, replace
from typing import Any

from cpstore.errors import LedgerGuardError
from cpstore.native.binding import digest
from cpstore.native.records import (
    RECORD_SIZE,
    Provenance,
    RecordType,
    kind_code,
    pack_token,
    value_digest,
)
from cpstore.native.state import state_digest
from cpstore.replay.session import ReplaySession
from cpstore.run.model import Observation, PackedTokens, ReplayMode, Run
from cpstore.store.recorder import Recorder

__all__ = ["AgentIO", "Faults", "RecordingIO", "ReplayIO", "World", "agent_step"]

_TOKEN = RECORD_SIZE[RecordType.TOKEN]


class World:
    """The live environment: everything outside the agent, deterministic per seed."""

    def __init__(self, seed: int = 7) -> None:
        self.config_version = 1
        self._rng = random.Random(seed)
        self.performed: list[tuple[str, bytes]] = []
        self.rate_limiter = 0

    def fetch(self, step: int, source: str) -> bytes:
        """A live read: the config service or the search tool."""
        if source == "read_config":
            flag = "A" if self.config_version == 1 else "B"
            cfg = {"version": self.config_version, "model": "m-1", "feature_flag": flag}
            return json.dumps(cfg, sort_keys=True).encode()
        return f"results for query {step % 37}: doc-{step % 11}, doc-{step % 13}".encode()

    def clock(self, step: int) -> float:
        """The wall clock as the agent reads it."""
        return 1_767_000_000.0 + step * 0.25

    def draw(self) -> float:
        """A live random draw."""
        return self._rng.random()

    def perform(self, target: str, payload: bytes) -> None:
        """A real side effect: it escapes the agent."""
        self.performed.append((target, payload))


class AgentIO:
    """What the agent can do; a recorder and each replay implement it differently."""

    def observe(self, step: int, source: str) -> bytes:  # pragma: no cover - interface
        """An external read."""
        raise NotImplementedError

    def token(self, step: int, kind: str, live: Callable[[], Any]) -> Any:  # pragma: no cover
        """A nondeterministic value."""
        raise NotImplementedError

    def decide(self, step: int, node: dict[str, Any]) -> None:  # pragma: no cover
        """A control-flow decision."""
        raise NotImplementedError

    def effect(self, step: int, target: str, payload: bytes) -> None:  # pragma: no cover
        """A side effect."""
        raise NotImplementedError


def agent_step(io: AgentIO, world: World, step: int, state: dict[str, Any], out: list[str]) -> None:
    """One step of the agent: read, draw, decide, act, update one state channel."""
    if step % 4 == 0:
        cfg = json.loads(io.observe(step, "read_config"))
        state["model"] = {"name": cfg["model"]}  # the feature flag is never used (seed 000)
    results = io.observe(step, "search").decode()
    now = io.token(step, "clock", lambda: world.clock(step))
    draw = io.token(step, "rng", world.draw)
    if step % 5 == 0:
        io.token(step, "tool", lambda: f"cached answer {step // 5 % 11}")
    tool = "search" if draw < 0.8 else "calculator"
    io.decide(step, {"node": "select_tool", "tool": tool})
    # Both tools give the same answer: the idempotent branch of seed 004.
    out.append(f"step {step}: {results.split(':')[0]}")
    if step % 10 == 9:
        io.effect(step, "crm.update", f"ticket {step}: resolved".encode())
    state[f"channel_{step % 8}"] = {"step": step, "result": results, "t": now, "r": round(draw, 9)}


def _transcript(out: list[str]) -> bytes:
    return "\n".join(out).encode()


class RecordingIO(AgentIO):
    """The live run: act on the world and record everything."""

    def __init__(self, rec: Recorder, world: World) -> None:
        self.rec = rec
        self.world = world

    def observe(self, step: int, source: str) -> bytes:
        payload = self.world.fetch(step, source)
        self.rec.observe(step, source, payload, pinned_at=self.world.clock(step))
        return payload

    def token(self, step: int, kind: str, live: Callable[[], Any]) -> Any:
        value = live()
        self.rec.token(kind, value)
        return value

    def decide(self, step: int, node: dict[str, Any]) -> None:
        self.rec.decision(step, node)

    def effect(self, step: int, target: str, payload: bytes) -> None:
        self.world.perform(target, payload)
        self.rec.effect(target, payload)


@dataclass
class Faults:
    """How a replay goes wrong; the empty default is a faithful replay."""

    refetch: set[tuple[int, str]] = field(default_factory=set)
    """(step, source) read live instead of from the pin (seed 000)."""
    live_tokens: set[tuple[int, str]] = field(default_factory=set)
    """(step, kind) resolved from a live source that happened to agree (seed 002)."""
    extra_effects: dict[int, tuple[str, bytes]] = field(default_factory=dict)
    """step -> an effect the replay attempts that the run never made."""
    flip_tool_at: int | None = None
    """A step where the replay takes the other tool: same answer (seed 004)."""
    harness_bumps: int = 0
    """Accesses the replay harness itself makes to the rate limiter (seed 004)."""
    mode: ReplayMode = ReplayMode.STRICT


class ReplayIO(AgentIO):
    """A replay engine on a :class:`ReplaySession`, with optional faults."""

    def __init__(self, session: ReplaySession, world: World, faults: Faults) -> None:
        self.s = session
        self.world = world
        self.faults = faults
        self._obs: list[Observation | int] = []  # an int is the index of a pinned read
        self._pinned = 0
        self.live_patches: dict[int, Any] = {}
        self.stopped: list[LedgerGuardError] = []

    def observe(self, step: int, source: str) -> bytes:
        if (step, source) in self.faults.refetch:
            payload = self.world.fetch(step, source)
            self._obs.append(Observation(step, source, digest(payload).hex(), None))
            return payload
        payload = self.s.observations.read(step, source)
        self._obs.append(self._pinned)
        self._pinned += 1
        return payload

    def token(self, step: int, kind: str, live: Callable[[], Any]) -> Any:
        seq = self.s.cursor.position
        value = self.s.cursor.resolve(kind)
        if (step, kind) in self.faults.live_tokens:
            # The engine went to the live source (evicted cache, RNG re-seeded
            # from the clock) and, as in seed 002, got the same value: only the
            # token's provenance tells the two apart.
            self.live_patches[seq] = (kind, value)
        return value

    def decide(self, step: int, node: dict[str, Any]) -> None:
        if step == self.faults.flip_tool_at:
            node = {**node, "tool": "calculator" if node["tool"] == "search" else "search"}
        self.s.decision(step, node)

    def effect(self, step: int, target: str, payload: bytes) -> None:
        try:
            self.s.guard.perform(target, payload, lambda: self.world.perform(target, payload))
        except LedgerGuardError as exc:
            self.stopped.append(exc)

    def finish(self, state: dict[str, Any], out: list[str]) -> Run:
        """The replay as the validator sees it."""
        run = self.s.finish(state_digest(state), transcript_digest=digest(_transcript(out)).hex())
        pinned = run.observations
        observations = tuple(o if isinstance(o, Observation) else pinned[o] for o in self._obs)
        tokens = run.tokens
        if self.live_patches:
            buf = bytearray(tokens.view())
            for seq, (kind, value) in self.live_patches.items():
                buf[seq * _TOKEN : (seq + 1) * _TOKEN] = pack_token(
                    seq, kind_code(kind), Provenance.LIVE, value_digest(value)
                )
            tokens = PackedTokens(bytes(buf), values=tokens.values, kind_names=tokens.kind_names)
        return replace(run, observations=observations, tokens=tokens, mode=self.faults.mode)
