"""review78's refusals for the comparison with 60c078b (run as a script with the tree to import
cpstore from first on the path): each scenario damages or misuses a fresh store the way a
check of the put path must catch (a named object missing or its heap entry gone, a damaged
ref, a vanished ref beside a new one (refs70), a reentrant write, a moved branch, a read-only
store) and prints the error's class and fields as JSON, one line per scenario.

Usage: ``python review78_checks.py TREE LOCATION``; LOCATION a folder prefix or a
PostgreSQL URL whose ``schema=`` is suffixed per scenario.
"""

from __future__ import annotations

import json
import sys
from collections.abc import Callable
from typing import Any

_TESTS = sys.path[0]


def _outcome(fn: Callable[[], Any]) -> list[Any]:
    try:
        fn()
    except Exception as exc:
        fields = [getattr(exc, k, None) for k in ("where", "expected", "got")]
        return [type(exc).__name__, str(exc), [f if f is None else str(f) for f in fields]]
    return ["no error"]


def main() -> None:
    tree, base = sys.argv[1], sys.argv[2]
    sys.path.insert(0, tree)
    import cpstore  # noqa: PLC0415
    from cpstore.native.binding import digest  # noqa: PLC0415
    from cpstore.native.canonical import encode_value  # noqa: PLC0415
    from cpstore.store import commit  # noqa: PLC0415
    from cpstore.store.model import ref_key  # noqa: PLC0415

    sys.path.insert(1, _TESTS)
    from stored import content_of, raw_delete, raw_get, raw_put, seq_of  # noqa: PLC0415

    if not cpstore.__file__ or not cpstore.__file__.startswith(tree):
        raise SystemExit(f"cpstore imported from {cpstore.__file__}, not {tree}")
    pg = base.startswith("postgresql:")
    made: list[str] = []

    def fresh() -> Any:
        n = len(made) + 1
        made.append(base.replace("schema=", f"schema=c{n}") if pg else f"{base}-{n}")
        return cpstore.open(made[-1], durability="none")

    def damage(st: Any, fn: Callable[[Any, Any], None]) -> None:
        st.backend.write_txn(lambda txn: fn(txn, st.backend.dbs))

    out: dict[str, list[Any]] = {}
    part = digest(encode_value("value-x"))

    with fresh() as st:  # a named object deleted behind the store's back
        rec = st.recorder("r")
        rec.checkpoint(0, {"p": "value-x", "q": 1})
        damage(st, lambda txn, dbs: raw_delete(txn, dbs, "objects", part))
        out["object_missing"] = _outcome(lambda: rec.checkpoint(1, {"p": "value-x", "q": 2}))
        out["object_missing_again"] = _outcome(lambda: rec.checkpoint(1, {"p": "value-x", "q": 3}))

    if not pg:  # the heap entry gone, its location row left (a damaged location)
        with fresh() as st:
            rec = st.recorder("r")
            rec.checkpoint(0, {"p": "value-x", "q": 1})

            def drop_entry(txn: Any, dbs: Any) -> None:
                content = content_of(dbs, "objects")
                assert content is not None
                seq = seq_of(txn, content, part)
                txn.delete(seq, db=content.heap)

            damage(st, drop_entry)
            out["heap_entry_gone"] = _outcome(lambda: rec.checkpoint(1, {"p": "value-x", "q": 2}))

    with fresh() as st:  # a damaged ref
        rec = st.recorder("r")
        rec.checkpoint(0, {"a": 1})
        key = ref_key("r", "main")

        def flip(txn: Any, dbs: Any) -> None:
            value = bytearray(raw_get(txn, dbs, "refs", key) or b"")
            value[3] ^= 0xFF
            raw_put(txn, dbs, "refs", key, bytes(value))

        damage(st, flip)
        out["ref_damaged"] = _outcome(lambda: rec.checkpoint(1, {"a": 2}))

    with fresh() as st:  # refs70: a ref vanished, a new one created from nothing
        st.recorder("r").checkpoint(0, {"a": 1})
        st.recorder("s").checkpoint(0, {"a": 1})
        damage(st, lambda txn, dbs: raw_delete(txn, dbs, "refs", ref_key("s", "main")))
        out["refs70_new_run"] = _outcome(lambda: st.recorder("t").checkpoint(0, {"a": 1}))
        out["refs70_vanished_run"] = _outcome(lambda: st.recorder("s").checkpoint(0, {"a": 2}))

    with fresh() as st:  # a write from inside a write (as a signal handler's would be)
        first, second = st.recorder("r"), st.recorder("s")
        # commit's own name for the ref write: write_ref, commit_ref since meta80
        name = "commit_ref" if hasattr(commit, "commit_ref") else "write_ref"
        real = getattr(commit, name)
        seen: list[list[Any]] = []

        def nested(*args: Any, **kwargs: Any) -> None:
            if not seen:
                seen.append(_outcome(lambda: second.checkpoint(0, {"b": 1})))
            real(*args, **kwargs)

        setattr(commit, name, nested)
        try:
            first.checkpoint(0, {"a": 1})
        finally:
            setattr(commit, name, real)
        out["reentrant"] = seen[0]

    with fresh() as st:  # a moved branch
        a, b = st.recorder("r"), st.recorder("r")
        a.checkpoint(0, {"a": 1})
        out["moved"] = _outcome(lambda: b.checkpoint(0, {"a": 2}))

    if not pg:
        with fresh() as st:
            st.recorder("r").checkpoint(0, {"a": 1})
        with cpstore.open(made[-1], readonly=True) as st:
            out["read_only"] = _outcome(lambda: st.recorder("r").checkpoint(1, {"a": 2}))
    for name, got in out.items():
        line = json.dumps([name, got])
        for where in sorted(made, key=len, reverse=True):  # the store's place: not compared
            line = line.replace(where, "STORE")
        print(line)


if __name__ == "__main__":
    main()
