"""Audit 35: chat histories stored as chunk trees, adversarial inputs, on LMDB and PostgreSQL.

The chunk-tree tests (tests/test_store_chunk_trees.py, tests/test_append_state.py) run on
LMDB; PostgreSQL reached chunk trees only through other tests. Here one sequence of
checkpoints of hostile histories (empty, one huge message, messages whose encodings end
on and around every cut rule's bound, a message edited in the middle and in the
provisional tail, a list that shrinks, unicode beyond the BMP, bytes values past the
chunker's maximum) is recorded on both backends: every checkpoint reads back
byte-identical through each read path, the two stores give the very same checkpoint ids
(the same chunks, nodes and roots: ids name the manifests, which name the roots), and
verify is clean. Then a frame is damaged in the PostgreSQL tables behind the store's
back (a byte flipped; two frames of equal size swapped; one deleted): every verified
read refuses it and verify names it.
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import psycopg
import pytest
from pg_cluster import fresh_url, pg_cluster  # noqa: F401 - fixtures

import cpstore
from cpstore.errors import IntegrityError
from cpstore.native.append_log import AppendLog
from cpstore.native.canonical import encode_value
from cpstore.native.chunking import CHUNK_MAX
from cpstore.store import Store
from cpstore.store.chunk_tree import RUN_MIN, TREE_THRESHOLD
from cpstore.store.content import objects_of
from cpstore.store.pg_open import parse_url
from cpstore.store.verify import children


def _msg(n: int, tag: str = "m") -> str:
    """A str whose canonical encoding is ``n`` bytes (one more where no str encodes to n:
    33, 258, 65539 fall between two header sizes)."""
    for size in (n, n + 1):
        for header in (1, 2, 3, 5):
            text = tag * (size - header)
            if len(encode_value(text)) == size:
                return text
    raise AssertionError(n)


def _steps() -> Iterator[dict[str, Any]]:
    """The states of one recording, in order (each a dict of parts)."""
    log = AppendLog()
    plain: list[Any] = []
    yield {"log": log, "plain": []}  # empty
    for n in (RUN_MIN - 1, RUN_MIN, RUN_MIN + 1, 3, 3, 3, TREE_THRESHOLD + 1):
        log.append(_msg(n))
        plain.append(_msg(n, "p"))
    yield {"log": log, "plain": list(plain)}
    huge = "\U0001f600é" * 60_000  # one message of ~360 KB, beyond the BMP
    log.append(huge)
    plain.append(huge)
    yield {"log": log, "plain": list(plain)}
    for i in range(300):  # boundaries at every element: 300 tiny messages
        log.append(i % 7)
        plain.append(str(i))
    yield {"log": log, "plain": list(plain), "bytes": bytes(range(256)) * (CHUNK_MAX // 64)}
    plain[len(plain) // 2] = "edited in the middle"
    yield {"log": log, "plain": list(plain)}
    plain[-1] = "edited in the tail"
    yield {"log": log, "plain": list(plain)}
    del plain[-50:]  # a history that shrinks
    log.append({"role": "tool", "content": [1, 2.5, None, True, b"\x00\xff"]})
    yield {"log": log, "plain": list(plain), "bytes": b"\x00" * (CHUNK_MAX * 3 + 1)}
    edited = AppendLog([*list(log)[:-2], "an edit needs a new log"])
    yield {"log": edited, "plain": list(plain)}
    for n in range(CHUNK_MAX - 3, CHUNK_MAX + 4):  # elements around the chunker's maximum
        edited.append(_msg(n, "x"))
    yield {"log": edited, "plain": list(plain)}


def _record(url: str) -> list[tuple[str, dict[str, bytes]]]:
    """Record every step; (checkpoint id, part name -> canonical bytes expected)."""
    out = []
    with cpstore.open(url) as st:
        rec = st.recorder("chat")
        for step, state in enumerate(_steps()):
            want = {
                k: encode_value(list(v) if isinstance(v, AppendLog) else v)
                for k, v in state.items()
            }
            out.append((rec.checkpoint(step, state), want))
    return out


def _check_reads(st: Store, recorded: list[tuple[str, dict[str, bytes]]]) -> None:
    for cid, want in recorded:
        with st.read(cid) as view:
            state = view.state()
            assert isinstance(state, dict)
            assert {k: encode_value(v) for k, v in state.items()} == want, cid
            for name, enc in want.items():
                assert encode_value(view.state_part(name)) == enc
    walked = {e.manifest.id: e.state for e in st.history_states("chat")}
    for cid, want in recorded:
        state = walked[cid]
        assert isinstance(state, dict)
        assert {k: encode_value(v) for k, v in state.items()} == want


def test_hostile_histories_read_back_identical_with_the_same_ids_on_both_backends(
    request: pytest.FixtureRequest, tmp_path: Path
) -> None:
    request.getfixturevalue("pg_cluster")
    pg = fresh_url()
    on_lmdb, on_pg = _record(str(tmp_path / "s")), _record(pg)
    assert [c for c, _ in on_lmdb] == [c for c, _ in on_pg]  # the same trees, byte for byte
    for url, recorded in ((str(tmp_path / "s"), on_lmdb), (pg, on_pg)):
        with cpstore.open(url) as st:
            _check_reads(st, recorded)
            report = st.verify()
            assert report.ok, report.problems


def _frames(st: Store, cid: str, part: str) -> list[bytes]:
    with st.read(cid) as view:
        root = bytes(view.manifest.raw["state"]["chunked"][part])
    with st.backend.read_txn() as txn:
        kids = children(txn, objects_of(st.backend.dbs), "state.chunked", root, set())
        return [bytes(k) for k in kids if len(k) == 17]


def _sql(url: str, statement: str, *params: Any) -> list[Any]:
    schema = parse_url(url).schema
    with psycopg.connect(parse_url(url).conninfo, autocommit=True) as conn:
        cur = conn.execute(statement.replace("T.", f'"{schema}".'), params)
        return cur.fetchall() if cur.description is not None else []


def _flip(url: str, frames: list[bytes]) -> bytes:
    value = bytearray(_sql(url, "SELECT v FROM T.objects WHERE k = %s", frames[1])[0][0])
    value[-2] ^= 0x10
    _sql(url, "UPDATE T.objects SET v = %s WHERE k = %s", bytes(value), frames[1])
    return frames[1]


def _swap(url: str, frames: list[bytes]) -> bytes:
    rows = _sql(url, "SELECT k, v FROM T.objects WHERE k = ANY(%s)", frames)
    by_size: dict[int, list[tuple[bytes, bytes]]] = {}
    for k, v in rows:
        by_size.setdefault(len(v), []).append((bytes(k), bytes(v)))
    (a, va), (b, vb) = next(pair for pair in by_size.values() if len(pair) >= 2)[:2]
    _sql(url, "UPDATE T.objects SET v = %s WHERE k = %s", vb, a)
    _sql(url, "UPDATE T.objects SET v = %s WHERE k = %s", va, b)
    return a


def _delete(url: str, frames: list[bytes]) -> bytes:
    _sql(url, "DELETE FROM T.objects WHERE k = %s", frames[2])
    return frames[2]


@pytest.mark.parametrize("damage", [_flip, _swap, _delete])
def test_a_damaged_frame_in_postgresql_fails_every_verified_read_and_verify_names_it(
    request: pytest.FixtureRequest, damage: Any
) -> None:
    request.getfixturevalue("pg_cluster")
    url = fresh_url()
    with cpstore.open(url) as st:
        rec = st.recorder("chat")
        history = [f"message {i}: " + "the same words again " * (i % 9 + 3) for i in range(400)]
        cid = rec.checkpoint(0, {"history": history})
        victim = damage(url, _frames(st, cid, "history"))
        with pytest.raises(IntegrityError), st.read(cid) as view:
            view.state()
        with pytest.raises(IntegrityError), st.read(cid) as view:
            view.state_part("history")
        with pytest.raises(IntegrityError):
            st.history_states("chat")
        report = st.verify()
        assert not report.ok
        assert any(victim[:16].hex() in f"{p.where} {p.got}" for p in report.problems), (
            report.problems
        )
