"""The two ends of a recorder: the checkpoint it starts from, and its close.

:class:`RecorderEnds` is a base of :class:`cpstore.store.recorder.Recorder`
holding what runs once per recorder, never per checkpoint: loading the logs,
tokens and tags of the checkpoint it extends (its branch's head, or the parent
it forks from), and ending it (:meth:`~RecorderEnds.close`, the with-block, the
warning about side effects dropped unsealed). Methods are inherited, never
wrapped; the per-step and per-checkpoint calls stay in ``recorder.py``.
"""

from __future__ import annotations

import warnings
from array import array
from typing import Any, Self

from cpstore.errors import InvalidInputError, UnsealedEffectsError
from cpstore.native.args import as_offsets
from cpstore.native.canonical import decode_value, encode_value
from cpstore.native.records import KindTable
from cpstore.store.backend import Backend
from cpstore.store.content import objects_of
from cpstore.store.lmdb_open import PROCESS
from cpstore.store.manifest import referenced_digests
from cpstore.store.objects import get_object

__all__ = ["RecorderEnds"]

_TOKEN_OBJECTS = ("records", "values", "offsets")


class RecorderEnds:
    """A recorder's start from a checkpoint and its end (a base of :class:`Recorder`)."""

    _store: Backend
    _process: object
    _run_id: str
    _branch: str
    _parent: bytes | None
    _last_step: int | None
    _tokens: bytearray
    _values: bytearray
    _offsets: array[int]
    _kinds: KindTable
    _observations: list[list[Any]]
    _graph: list[dict[str, Any]]
    _effects: list[list[Any]]
    _harness: list[dict[str, Any]]
    _transcript: bytes | None
    _tags: dict[str, None]
    _sealed_count: int
    _closed: bool
    _confirmed: set[bytes]
    _logged: set[bytes]
    _logs: dict[str, bytes | None]
    _dirty: set[str]
    _inherited: set[bytes]
    _token_refs: dict[str, bytes] | None

    # -- the start: the checkpoint this recorder extends ---------------------

    def _load_parent(self, cid: bytes) -> None:
        store = self._store
        with store.read_txn() as txn:
            objects = objects_of(store.dbs)
            m = store.load_manifest(txn, cid, verify=True)
            self._last_step = m.step
            if m.run_id != self._run_id:
                raise InvalidInputError(
                    "a branch can only fork from a checkpoint of its own run",
                    where=f"run {self._run_id}",
                    expected=self._run_id,
                    got=m.run_id,
                )
            raw = m.raw

            def load(key: bytes, where: str) -> memoryview:
                return get_object(txn, objects, key, verify=True, where=f"{where} of {m.id}")

            tokens = raw["tokens"]
            if tokens is not None:
                self._tokens = bytearray(load(tokens["records"], "token records"))
                self._values = bytearray(load(tokens["values"], "token values"))
                self._offsets = as_offsets(load(tokens["offsets"], "token offsets"), "little")
                self._kinds = KindTable({int(k): v for k, v in tokens["kinds"].items()})
            for name, attr in (
                ("observations", "_observations"),
                ("call_graph", "_graph"),
                ("effects", "_effects"),
                ("harness", "_harness"),
            ):
                if raw[name] is not None:
                    setattr(self, attr, decode_value(load(raw[name], name)))
            self._transcript = raw["transcript"]
            # Objects the fork inherits: checked to still exist at the first commit.
            self._confirmed = referenced_digests(raw)
            self._logged = {obs[2] for obs in self._observations}
            self._logged.update(eff[2] for eff in self._effects)
            self._inherited = self._confirmed | self._logged
        self._tags = dict.fromkeys(m.provenance_tags)
        self._parent = cid
        self._logs = {
            name: raw[name] for name in ("observations", "call_graph", "effects", "harness")
        }
        tokens = raw["tokens"]
        self._logs["tokens"] = None if tokens is None else encode_value(tokens)
        self._token_refs = None if tokens is None else {k: tokens[k] for k in _TOKEN_OBJECTS}
        self._dirty = set()

    # -- the end --------------------------------------------------------------

    def flush(self) -> None:
        """Commit the store's queued checkpoints (batched mode); fsync its commits (none mode)."""
        self._store.flush()

    @property
    def unsealed_effects(self) -> int:
        """Effects this recorder appended that no checkpoint of it sealed yet."""
        return len(self._effects) - self._sealed_count

    def close(self, *, discard_effects: bool = False) -> None:
        """Flush the store's queued checkpoints and end this recorder.

        Raises :class:`UnsealedEffectsError` (nothing is flushed or ended) when
        effects were appended that no checkpoint sealed, unless
        ``discard_effects=True`` says dropping them is intended. A side effect
        that happened but is in no sealed ledger is one a replay cannot guard.
        """
        if self._closed:
            return
        count = self.unsealed_effects
        if count and not discard_effects:
            raise UnsealedEffectsError(
                "recorder closed holding side effects no checkpoint sealed; "
                "checkpoint them (seal_ledger=True) or close(discard_effects=True)",
                where=f"run {self._run_id} branch {self._branch}",
                expected=0,
                got=count,
            )
        self._closed = True
        self._store.flush()

    def __enter__(self) -> Self:
        return self

    def __exit__(self, exc_type: object, exc: object, tb: object) -> None:
        if exc_type is None:
            self.close()
            return
        # Leaving on an error: do not mask it; say what is dropped instead.
        self._warn_unsealed("leaving its with-block on an error")
        self._closed = True

    def _warn_unsealed(self, when: str) -> None:
        """RuntimeWarning naming the run when effects are dropped unsealed (once)."""
        if self._closed or self._process is not PROCESS[0]:
            return  # a fork() child's copy (or a descendant's): the parent holds (and seals) them
        self._closed = True
        count = self.unsealed_effects
        if count:
            warnings.warn(
                f"cpstore recorder for run {self._run_id!r} branch {self._branch!r} "
                f"dropped {count} side effect(s) no checkpoint sealed, {when}",
                RuntimeWarning,
                stacklevel=3,
            )

    def __del__(self) -> None:
        if hasattr(self, "_closed"):
            self._warn_unsealed("when garbage-collected")
