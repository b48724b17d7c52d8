"""A branch's history with every checkpoint's state, read in one read txn.

:meth:`Store.history` returns manifests only; a caller that wants the states
too would need one :meth:`Store.read` (one txn) per entry, and the branch may
move in between. :func:`history_states` walks the same path as
:func:`~cpstore.store.branches.history` in one txn. Each entry's manifest is
hash-checked against its id, its state map and parent shape-checked, and every
state part it names hash-checked and decoded, as ``store.read(id).state()``
does; the other fields and the header's ``created_at`` check are checked when
``entry.manifest`` is first used, as the reader checks them. Within one call
a part whose digest already passed its hash check in this txn (an unchanged
channel) is not hashed again: its value is shared when it is immutable (str,
bytes, numbers, None) and decoded afresh from the checked bytes otherwise, so
no entry ever holds a list or dict another entry holds. Nothing outlives the
call.
"""

from __future__ import annotations

from dataclasses import FrozenInstanceError
from itertools import repeat
from typing import Any

from cpstore.errors import IntegrityError, InvalidInputError, NotFoundError
from cpstore.store.backend import Backend, Txn
from cpstore.store.decode import DECODE_ERRORS, decoded_alike, msgspec_safe
from cpstore.store.decode import decode_part as _decode
from cpstore.store.fast_read import checked_part, contents
from cpstore.store.manifest import Manifest, check_manifest_rest, manifest_from_raw
from cpstore.store.model import check_name, created_at_of, ref_key
from cpstore.store.reader import CheckpointView

__all__ = ["HistoryEntry", "history_states"]

#: Decoded values one entry may share with another: none can be changed.
_IMMUTABLE = frozenset({str, bytes, int, float, bool, type(None)})
_MISS = object()
_ZERO4 = bytes(4)
_set = object.__setattr__
_new = object.__new__


class HistoryEntry:
    """One checkpoint of a branch's history and its state, from :meth:`Store.history_states`.

    Read-only. ``manifest`` is built on first use from the manifest map that
    was hash-checked against the id when the entry was read; its fields other
    than the state, and the entry header's ``created_at`` check, are checked
    then, as :attr:`CheckpointView.manifest` checks them (IntegrityError when
    one fails). A walk that only wants states pays for neither.
    """

    __slots__ = ("_manifest", "_source", "_state")
    _manifest: Manifest | None
    _state: bytes | dict[str, Any]
    _source: tuple[bytes, dict[str, Any], bytes, bool] | None

    def __init__(self, manifest: Manifest, state: bytes | dict[str, Any]) -> None:
        _set(self, "_manifest", manifest)
        _set(self, "_state", state)
        _set(self, "_source", None)

    @classmethod
    def _read(
        cls,
        source: tuple[bytes, dict[str, Any], bytes, bool],
        state: bytes | dict[str, Any],
    ) -> HistoryEntry:
        """An entry from (id, manifest map, entry header, verify); its Manifest on first use."""
        entry = _new(cls)
        _set(entry, "_manifest", None)
        _set(entry, "_state", state)
        _set(entry, "_source", source)
        return entry

    def __reduce__(self) -> tuple[type[HistoryEntry], tuple[Manifest, bytes | dict[str, Any]]]:
        # Pickle and copy rebuild through __init__ (slots assignment would be refused).
        return (HistoryEntry, (self.manifest, self._state))

    def __setattr__(self, name: str, value: object) -> None:
        raise FrozenInstanceError(f"cannot assign to field {name!r}")

    def __delattr__(self, name: str) -> None:
        raise FrozenInstanceError(f"cannot delete field {name!r}")

    @property
    def manifest(self) -> Manifest:
        """The checkpoint's manifest (equal to the one :meth:`Store.history` returns)."""
        built = self._manifest
        if built is None:
            source = self._source
            if source is None:  # pragma: no cover - built with a manifest, never None
                raise TypeError("a history entry without its manifest")
            cid, raw, header, verify = source
            check_manifest_rest(cid, raw)  # every field but the state, before its first use
            built = manifest_from_raw(cid, raw, created_at_of(header, cid if verify else None))
            _set(self, "_manifest", built)
        return built

    @property
    def state(self) -> bytes | dict[str, Any]:
        """The whole state, as ``store.read(manifest.id).state()`` returns it.

        Bytes, or part name -> value; no list or dict in it is shared with
        another entry.
        """
        return self._state

    @property
    def id(self) -> str:
        """The checkpoint id."""
        return self.manifest.id

    def __eq__(self, other: object) -> bool:
        if not isinstance(other, HistoryEntry):
            return NotImplemented
        return self.manifest == other.manifest and self._state == other._state

    __hash__ = None  # type: ignore[assignment]  # like the frozen dataclass: the state is a dict

    def __repr__(self) -> str:
        return f"HistoryEntry(manifest={self.manifest!r}, state={self._state!r})"


def _parts(
    txn: Txn[memoryview],
    objects: Any,
    st: dict[str, Any],
    shared: dict[bytes, Any],
    checked: dict[bytes, Any],
    *,
    hints: bytes = b"",
) -> dict[str, Any] | None:
    """Every part of a parts state, hash-checked (once per digest per call) and decoded.

    ``shared`` maps a digest checked in this txn to its immutable value,
    ``checked`` to its checked bytes (decoded again for each entry). None
    sends the caller to :class:`CheckpointView`, which raises naming a part
    that is missing, wrong or not one canonical value. ``hints``: the record's
    location hints (content.py), each tried first and trusted only once hashed
    (:func:`~cpstore.store.fast_read.read_parts`, with this walk's memo).
    """
    parts: dict[str, bytes] = st["parts"]
    if st["kind"] != "parts" or not parts or st.get("chunked") or not msgspec_safe():
        return None
    if objects.heap is None or len(hints) != 4 * len(parts):
        hints = b""
    # Every part met before with an immutable value in one C-level pass (most
    # parts of a walk are unchanged channels); only the others are looked at.
    keys = list(parts.values())
    values = list(map(shared.get, keys, repeat(_MISS)))
    try:
        if _MISS in values:  # identity first; no decoded value equals a bare object()
            for i, key in enumerate(keys):
                if values[i] is not _MISS:
                    continue
                value = shared.get(key, _MISS)  # a digest twice in this state: met above
                if value is not _MISS:
                    values[i] = value
                    continue
                data: Any = checked.get(key)
                if data is None:
                    # Only a new part's hint is looked at.
                    hint = hints[4 * i : 4 * i + 4]
                    seq = _ZERO4 + hint if hint and hint != _ZERO4 else None
                    data = checked_part(txn, objects, key, seq)  # hash-checked, hint first
                    if data is None:
                        return None
                    value = _decode(data)
                    if type(value) in _IMMUTABLE:
                        shared[key] = value
                    elif not decoded_alike(value):
                        return None  # msgpack decodes it otherwise: CheckpointView does
                    else:
                        checked[key] = data
                else:  # a list or dict: a fresh decode for this entry
                    value = _decode(data)
                values[i] = value
    except DECODE_ERRORS:
        return None
    except IntegrityError:
        return None  # a damaged location: CheckpointView names it
    return dict(zip(parts, values))  # noqa: B905 - equal lengths


def history_states(
    backend: Backend,
    run_id: str,
    branch: str = "main",
    *,
    limit: int | None = None,
    verify: bool = True,
) -> list[HistoryEntry]:
    """Checkpoints with their states from the head of ``branch`` back, newest first.

    One read txn for the whole walk, so the entries are one consistent
    snapshot even while another process moves the head. Stops where
    :func:`~cpstore.store.branches.history` stops (its walk, without the
    second lookup of each entry): at ``limit``, at a run's first checkpoint or
    at a pruned one. A damaged object raises :class:`IntegrityError` naming
    the object and the checkpoint, and no entry is returned.
    """
    if limit is not None and (not isinstance(limit, int) or isinstance(limit, bool) or limit < 0):
        raise InvalidInputError("limit must be a non-negative int or None", got=limit)
    key = ref_key(check_name(run_id, "run_id"), check_name(branch, "branch"))
    shared: dict[bytes, Any] = {}
    checked: dict[bytes, Any] = {}
    out: list[HistoryEntry] = []
    try:
        with backend.read_txn() as txn:
            objects = contents(backend.dbs)[0]
            cid = backend.head(txn, key)
            while cid is not None and (limit is None or len(out) < limit):
                # The state is checked here, the other fields when the manifest is
                # first used (PostgreSQL prefetches the state's objects on this path).
                hints: list[bytes] = []
                try:
                    raw, header = backend.load_raw(
                        txn, cid, verify=verify, full=False, hints=hints if verify else None
                    )
                except NotFoundError:
                    break  # pruned: history ends here, as history() ends
                state: bytes | dict[str, Any] | None = None
                if verify:
                    block = hints[0] if hints else b""
                    state = _parts(txn, objects, raw["state"], shared, checked, hints=block)
                if state is None:  # bytes, chunked, verify=False, or damage to name
                    with CheckpointView(backend, cid, verify=verify, txn=txn) as view:
                        state = view.state()
                out.append(HistoryEntry._read((cid, raw, header, verify), state))
                parent = raw.get("parent")
                if parent is not None and (type(parent) is not bytes or len(parent) != len(cid)):
                    check_manifest_rest(cid, raw)  # raises, naming the parent field
                cid = parent
    finally:
        checked.clear()  # views into the map: dropped with the txn
    return out
