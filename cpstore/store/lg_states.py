"""Whole states of many checkpoints in one caller-owned read txn (the LangGraph saver's reads).

``CpstoreSaver.list`` reads the checkpoints its index entries name, newest
first; they are no branch walk (forks and namespaces interleave), so
:func:`~cpstore.store.history.history_states` does not serve them, and a
:class:`~cpstore.store.reader.CheckpointView` per entry re-reads and re-hashes
every part the previous entry already checked (9 of 10 channels are unchanged
from one LangGraph step to the next). :class:`StateReads` reads each
checkpoint as ``CheckpointView(backend, cid, verify=True, txn=txn).state()``
does, with history_states' rule: each record hash-checked against its id, its
state shape-checked, every part hash-checked and decoded through
:func:`~cpstore.store.fast_read.read_parts`, and a part whose digest already
passed its hash check in this txn not read again when its value is immutable
(str, bytes, numbers, None: the one object is handed out again; a list or dict
is read and decoded afresh). Anything else (bytes or chunked states, damage,
a value msgpack decodes otherwise) goes through the view, which raises naming
what is wrong. Nothing outlives the object, which lives within the txn.
"""

from __future__ import annotations

from typing import Any

from cpstore.errors import NotFoundError
from cpstore.store.backend import Backend, Txn
from cpstore.store.decode import ALIKE_SCALARS
from cpstore.store.fast_read import contents, part_views, read_parts
from cpstore.store.model import check_created
from cpstore.store.reader import CheckpointView

__all__ = ["StateReads"]

_HINT = 4


class StateReads:
    """Verified whole states of checkpoints, read in one read txn the caller owns."""

    __slots__ = ("_backend", "_last", "_objects", "_shared", "_txn")

    def __init__(self, backend: Backend, txn: Txn[memoryview]) -> None:
        self._backend = backend
        self._txn = txn
        # After the txn began: a read-only handle may have adopted the heap tables then.
        self._objects = contents(backend.dbs)[0]
        #: digest -> the immutable value of a part hash-checked in this txn.
        self._shared: dict[bytes, Any] = {}
        #: The first state read, shared once a second one is read.
        self._last: tuple[dict[str, bytes], dict[str, Any]] | None = None

    def state(self, cid: bytes) -> bytes | dict[str, Any] | None:
        """The whole state of checkpoint ``cid``, as :meth:`CheckpointView.state` returns it.

        None when no record of ``cid`` is stored (the caller tells pruned from
        lost); IntegrityError naming damage.
        """
        # as CheckpointView.state(): created_at unused
        got = self.state_and_metadata(cid, header=False)
        return None if got is None else got[0]

    def state_and_metadata(
        self, cid: bytes, *, header: bool = True
    ) -> tuple[bytes | dict[str, Any], Any] | None:
        """:meth:`state` and the manifest's ``metadata`` field as decoded (hash-checked
        with the manifest against ``cid``, not shape-checked: the caller checks what it
        uses; no other manifest field is looked at; the header's ``created_at`` check is
        verified, its value not used: the manifest is used, as ``CheckpointView.manifest``).
        ``header=False`` (:meth:`state`) leaves the header's check out, as
        ``CheckpointView.state`` does."""
        got = self._manifest(cid, header)
        if got is None:
            return None
        st, meta, hints = got
        parts: dict[str, bytes] | None = st.get("parts")
        if type(meta) is dict and st["kind"] == "parts" and not st.get("chunked"):
            if not parts:
                return {}, meta  # no part to read: what CheckpointView.state() returns
            out = self._parts(parts, hints)
            if out is not None:
                return out, meta
        with CheckpointView(self._backend, cid, verify=True, txn=self._txn) as view:
            return view.state(), meta

    def _manifest(self, cid: bytes, header: bool) -> tuple[dict[str, Any], Any, bytes] | None:
        """(the manifest's ``state`` and ``metadata`` fields, its parts' location hints)
        of checkpoint ``cid``, hash-checked against ``cid`` (and its header's
        ``created_at`` check when ``header``); None when no record is stored."""
        hints: list[bytes] = []
        try:
            raw, head = self._backend.load_raw(self._txn, cid, verify=True, full=False, hints=hints)
        except NotFoundError:
            return None
        if header:
            check_created(head, cid)  # created_at_of's check, as every verified use of the manifest
        return raw["state"], raw.get("metadata"), hints[0] if hints else b""

    def part_views(self, cid: bytes) -> tuple[dict[str, bytes], list[memoryview], Any] | None:
        """(the parts, name -> digest; their bytes, each hash-checked, in that order; the
        manifest's ``metadata``) of checkpoint ``cid``, read and checked as
        :meth:`state_and_metadata` reads them, the parts not decoded: for a caller that
        decodes them itself within the txn (the views are the txn's pages). None for
        anything but a parts state (not chunked) whose every part is at its hinted heap
        entry, and for a missing record: the caller then takes
        :meth:`state_and_metadata`, which reads it again and names what is wrong.
        Nothing is shared: every part is read and hashed at each call."""
        got = self._manifest(cid, True)  # as state_and_metadata, in its order
        if got is None:
            return None
        st, meta, hints = got
        parts: dict[str, bytes] | None = st.get("parts")
        if type(meta) is not dict or st["kind"] != "parts" or st.get("chunked") or not parts:
            return None
        views = part_views(self._txn, self._objects, parts, hints)
        return None if views is None else (parts, views, meta)

    def _parts(self, parts: dict[str, bytes], hints: bytes) -> dict[str, Any] | None:
        """Every part, the ones not checked in this txn through ``read_parts``; None: the view."""
        last = self._last
        if last is not None:  # a second state: share the first one's (one read pays nothing)
            self._last = None
            self._share(*last)
        shared = self._shared
        if not shared:
            got = read_parts(self._txn, self._objects, parts, hints)
            if got is not None:
                self._last = (parts, dict(got))  # not the dict handed out: it may be changed
            return got
        keys = list(parts.values())
        todo = [i for i, key in enumerate(keys) if key not in shared]
        if not todo:
            return {name: shared[key] for name, key in parts.items()}
        names = list(parts)
        fresh = {names[i]: keys[i] for i in todo}
        hinted = len(hints) == _HINT * len(keys)
        block = b"".join(hints[_HINT * i : _HINT * i + _HINT] for i in todo) if hinted else b""
        got = read_parts(self._txn, self._objects, fresh, block)
        if got is None:
            return None
        self._share(fresh, got)
        out = {name: shared.get(key) for name, key in parts.items()}
        out.update(got)  # the same keys: their order stays the parts' order
        return out

    def _share(self, parts: dict[str, bytes], values: dict[str, Any]) -> None:
        shared = self._shared
        for name, key in parts.items():
            value = values[name]
            if type(value) in ALIKE_SCALARS:
                shared[key] = value
