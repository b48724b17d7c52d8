"""AppendLog parts: the same bytes and ids as the plain list, a tree continued exactly."""

from __future__ import annotations

import copy
import gc
import linecache
import multiprocessing
import os
import pickle
import random
import sys
import threading
from pathlib import Path
from types import FrameType
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import cpstore
from cpstore.errors import CanonicalEncodingError, InvalidInputError
from cpstore.native.append_log import AppendLog, log_view
from cpstore.native.binding import digest
from cpstore.native.canonical import decode_value, encode_value
from cpstore.native.chunking import CHUNK_MAX
from cpstore.store.append_state import AppendParts, Built, LogTree
from cpstore.store.chunk_tree import (
    ROOT_VERSION,
    TREE_THRESHOLD,
    build_tree,
    read_root,
    read_upper,
)
from cpstore.store.codec import encode_frame


def _continued(tree: LogTree, log: AppendLog) -> tuple[Built, bytes, list[tuple[bytes, int, int]]]:
    """Build ``log`` on ``tree``; return the result, the bytes and the chunk list (absolute)."""
    with log_view(log) as (header, body, ends):
        built = tree.build(header, body, ends[tree.elements :])
        data = header + bytes(body)
    chunks: list[tuple[bytes, int, int]] = []
    at = len(header)
    for fkey, size in zip(tree.frame_keys, tree.chunk_sizes, strict=True):
        chunks.append((fkey, at, at + size))
        at += size
    if built.tail is not None:
        chunks.append((built.tail[0], built.tail[1] + len(header), built.tail[2] + len(header)))
    return built, data, chunks


def _assert_same_tree(tree: LogTree, log: AppendLog) -> bytes | None:
    """Assert the continued tree is build_tree's, byte for byte; return its upper spine key."""
    built, data, chunks = _continued(tree, log)
    full = build_tree(data, canonical=True)
    assert data == encode_value(log.to_list())
    assert built.whole == full.whole
    assert built.root == full.root
    assert chunks == full.chunks
    nodes = {**tree.nodes, **built.fresh}
    assert set(tree.all_keys(built)) == set(full.nodes) | {k for k, _, _ in full.chunks}
    assert {k: nodes[k] for k in full.nodes} == full.nodes
    # Root v2: the same root bytes and, for a tree of 2+ levels, the same upper spine,
    # listed among what this build made (so a stash writes it whenever it is new).
    assert built.fresh[built.root] == full.nodes[full.root]
    assert decode_value(built.fresh[built.root])[0] == ROOT_VERSION
    upper = read_root(built.fresh[built.root], "test")[3]
    if upper is not None:
        assert built.fresh[upper] == full.nodes[upper]
        assert read_upper(full.nodes[upper], "test")  # the tails of levels 2 and up
    return upper


def _blob(size: int, seed: int) -> bytes:
    """``size`` pseudo-random bytes (seed 0: one repeated byte, the chunker's adversary)."""
    return bytes(size) if seed == 0 else random.Random(seed).randbytes(size)


elements = st.one_of(
    st.binary(max_size=64),
    st.builds(_blob, st.integers(0, 1200), st.integers(0, 3)),
    st.builds(_blob, st.integers(CHUNK_MAX - 100, 3 * CHUNK_MAX), st.integers(0, 3)),
    st.integers(-(2**70), 2**70),
    st.text(max_size=30),
    st.builds(
        lambda n, i: {"role": "user", "content": "w" * n, "i": i},
        st.integers(0, 900),
        st.integers(),
    ),
    st.none(),
)


@settings(max_examples=60, deadline=None)
@given(st.lists(st.lists(elements, max_size=12), min_size=1, max_size=8), st.randoms())
def test_a_continued_tree_equals_the_tree_built_from_the_whole_bytes(
    batches: list[list[Any]], rnd: Any
) -> None:
    """After every batch of appends: same whole digest, root v2, upper spine, chunks and nodes."""
    log = AppendLog()
    tree = LogTree()
    for batch in batches:
        log.extend(batch)
        _assert_same_tree(tree, log)
        if rnd.random() < 0.3:
            _assert_same_tree(tree, log)  # a build with nothing appended changes nothing


@pytest.mark.parametrize(("before", "after"), [(15, 16), (14, 17), (65535, 65536), (65530, 65540)])
def test_header_length_class_changes_keep_the_continued_tree_exact(before: int, after: int) -> None:
    """Array headers growing 1->3 and 3->5 bytes: the continued tree still equals build_tree."""
    size = 700 if after < 100 else 1
    log = AppendLog(bytes([i % 251]) * size for i in range(before))
    tree = LogTree()
    _assert_same_tree(tree, log)
    log.extend(bytes([i % 13]) * size for i in range(after - before))
    _assert_same_tree(tree, log)


@given(st.lists(elements, max_size=20))
def test_an_append_log_encodes_like_the_plain_list(items: list[Any]) -> None:
    """AppendLog(items).encoding() == encode_value(items); it reads back as the list."""
    log = AppendLog(items)
    assert log.encoding() == encode_value(items)
    assert log.to_list() == decode_value(encode_value(items)) == list(log)
    assert len(log) == len(items)


def test_append_snapshots_the_element_and_reads_hand_out_copies() -> None:
    """Mutating an appended dict, or a value read back, changes nothing in the log."""
    msg = {"role": "user", "content": "hi"}
    log = AppendLog([msg])
    msg["content"] = "changed"
    got = log[0]
    got["role"] = "x"
    assert log[0] == {"role": "user", "content": "hi"}
    assert log[-1] == log[0]
    assert log[0:1] == [{"role": "user", "content": "hi"}]
    with pytest.raises(IndexError):
        log[1]


def test_a_refused_element_is_named_by_its_index_and_not_appended() -> None:
    """append of a lone surrogate: CanonicalEncodingError at $[2]..., the log unchanged."""
    log = AppendLog(["a", "b"])
    with pytest.raises(CanonicalEncodingError) as exc:
        log.append({"content": "\udc80"})
    assert exc.value.where == "$[2]{'content'}"
    assert len(log) == 2
    assert log.encoding() == encode_value(["a", "b"])


def _messages(cp: cpstore.CheckpointView) -> Any:
    state = cp.state()
    assert isinstance(state, dict)
    return state["messages"]


def _history(n: int) -> list[dict[str, str]]:
    return [
        {"role": "user", "content": f"message {i} " + "w" * (300 + 97 * i % 900)} for i in range(n)
    ]


def test_checkpoint_ids_equal_the_plain_lists_and_reads_return_lists(tmp_path: Path) -> None:
    """Step by step the AppendLog route writes the plain list's checkpoint ids and bytes."""
    msgs = _history(60)
    with (
        cpstore.open(tmp_path / "a", durability="none") as a,
        cpstore.open(tmp_path / "b", durability="none") as b,
    ):
        ra, rb = a.recorder("chat"), b.recorder("chat")
        log = AppendLog()
        for i, m in enumerate(msgs):
            log.append(m)
            ca = ra.checkpoint(i, {"messages": log, "n": i})
            cb = rb.checkpoint(i, {"messages": msgs[: i + 1], "n": i})
            assert ca == cb
        with a.read(ca) as cp:
            got = _messages(cp)
        assert type(got) is list
        assert got == msgs
        assert a.verify().ok


def test_a_failed_commit_never_leaves_a_checkpoint_naming_a_missing_object(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A commit that raises, then more appends: every object of the next tree is stored."""
    msgs = _history(80)
    with cpstore.open(tmp_path / "s", durability="none") as st:
        rec = st.recorder("chat")
        log = AppendLog()
        backend = rec._store
        real = backend.commit
        for i, m in enumerate(msgs):
            log.append(m)
            if i in (30, 31, 55):

                def refuse(op: Any) -> None:
                    raise RuntimeError("injected commit failure")

                monkeypatch.setattr(backend, "commit", refuse)
                with pytest.raises(RuntimeError):
                    rec.checkpoint(i, {"messages": log})
                monkeypatch.setattr(backend, "commit", real)
                continue
            cid = rec.checkpoint(i, {"messages": log})
        st.flush()
        assert st.verify().ok
        with st.read(cid) as cp:
            assert _messages(cp) == msgs


def test_a_part_left_out_and_a_new_log_under_the_same_name_stay_exact(tmp_path: Path) -> None:
    """Leaving the part out, then a different log object: same ids as plain lists, verify ok."""
    msgs = _history(50)
    with (
        cpstore.open(tmp_path / "a", durability="none") as a,
        cpstore.open(tmp_path / "b", durability="none") as b,
    ):
        ra, rb = a.recorder("chat"), b.recorder("chat")
        log = AppendLog()
        for i, m in enumerate(msgs):
            if i == 30:
                log = AppendLog(msgs[:30])  # a new object with the same elements
            log.append(m)
            sa: dict[str, Any]
            sb: dict[str, Any]
            if i in (20, 21):
                sa, sb = {"other": i}, {"other": i}
            else:
                sa, sb = {"messages": log}, {"messages": msgs[: i + 1]}
            assert ra.checkpoint(i, sa) == rb.checkpoint(i, sb)
        assert a.verify().ok


def test_a_forked_recorder_continues_from_the_read_back_list(tmp_path: Path) -> None:
    """Resuming a run: AppendLog(state read back) then appends, ids as the plain list's."""
    msgs = _history(40)
    with cpstore.open(tmp_path / "s", durability="none") as st:
        rec = st.recorder("chat")
        log = AppendLog()
        for i, m in enumerate(msgs[:25]):
            log.append(m)
            head = rec.checkpoint(i, {"messages": log})
        with st.read(head) as cp:
            resumed = AppendLog(_messages(cp))
        again = st.recorder("chat", branch="b", parent=head)
        plain = st.recorder("chat", branch="c", parent=head)
        for i, m in enumerate(msgs[25:], start=25):
            resumed.append(m)
            ia = again.checkpoint(i, {"messages": resumed})
            ib = plain.checkpoint(i, {"messages": msgs[: i + 1]})
            with st.read(ia) as a, st.read(ib) as b:
                assert a.manifest.raw["state"] == b.manifest.raw["state"]
                assert a.state() == {"messages": msgs[: i + 1]}
        assert st.verify().ok


def test_thousands_of_small_appends_in_uneven_batches_keep_every_level_exact() -> None:
    """Multi-level trees (settled nodes at several levels) equal build_tree after each batch."""
    rnd = random.Random(16)
    log = AppendLog()
    tree = LogTree()
    uppers = []
    while len(log) < 3000:
        log.extend(
            {"role": "user", "content": "x" * rnd.randrange(200, 1400)}
            for _ in range(rnd.choice([1, 1, 2, 7, 40, 150]))
        )
        uppers.append(_assert_same_tree(tree, log))
    assert len(tree.levels) >= 3
    assert None not in uppers[-10:] and len(set(uppers)) > 10  # upper spines, changing


def _stash_round(
    tree: LogTree, log: AppendLog, stored: set[bytes]
) -> tuple[Built, list[bytes], dict[bytes, bytes], bytes]:
    pending: dict[bytes, bytes] = {}
    with log_view(log) as (header, body, ends):
        built = tree.build(header, body, ends[tree.elements :])
        listed = tree.stash(built, body, pending, stored)
        data = header + bytes(body)
    return built, listed, pending, data


def test_a_stash_after_a_dropped_one_writes_every_object_the_tree_needs() -> None:
    """The previous root not stored: every key of the tree is listed, all missing ones stashed."""
    log = AppendLog(_history(40))
    tree = LogTree()
    _stash_round(tree, log, set())  # its objects never reach the store
    log.extend(_history(45)[40:])
    _, listed, pending, data = _stash_round(tree, log, set())
    full = build_tree(data, canonical=True)
    want = set(full.nodes) | {k for k, _, _ in full.chunks}
    assert set(listed) == want
    assert set(pending) == want
    assert all(pending[k] == v for k, v in full.nodes.items())


def test_a_stash_after_a_stored_root_lists_only_what_is_new_and_covers_the_rest() -> None:
    """The previous root stored (with what it listed): the rest is under it, the new is stashed."""
    log = AppendLog(_history(40))
    tree = LogTree()
    first, listed, _, _ = _stash_round(tree, log, set())
    stored = set(listed)
    log.extend(_history(45)[40:])
    _, listed2, pending, data = _stash_round(tree, log, stored)
    full = build_tree(data, canonical=True)
    want = set(full.nodes) | {k for k, _, _ in full.chunks}
    assert first.root in stored
    assert len(listed2) < len(want)
    assert want <= stored | set(pending)
    assert set(pending) <= set(listed2)


class _FakeRecorder:
    """The recorder's side of a part: pending objects, what the head reaches, a store."""

    def __init__(self) -> None:
        self._pending: dict[bytes, bytes] = {}
        self._confirmed: set[bytes] = set()
        self._chunks: list[bytes] = []
        self.stored: dict[bytes, bytes] = {}

    def _stash(self, data: bytes) -> bytes:
        key = digest(data)
        if key not in self._confirmed:
            self._pending[key] = data
        return key

    def commit(self, chunked: dict[str, Any]) -> None:
        self.stored.update(self._pending)
        self._confirmed = set(self._chunks) | set(chunked.values())
        self._pending, self._chunks = {}, []


ops = st.one_of(
    st.tuples(st.just("append"), st.integers(1, 30), st.integers(0, 1500)),
    st.tuples(st.just("change"), st.integers(0, 10**6), st.integers(0, 1500)),
    st.tuples(st.just("pop"), st.integers(1, 5), st.just(0)),
    st.tuples(st.just("insert"), st.integers(0, 10**6), st.integers(0, 1500)),
    st.tuples(st.just("clear"), st.just(0), st.just(0)),
)


@settings(max_examples=60, deadline=None)
@given(st.lists(ops, min_size=1, max_size=25), st.booleans())
def test_a_plain_list_continues_only_when_its_settled_bytes_are_unchanged(
    steps: list[tuple[str, int, int]], drop: bool
) -> None:
    """Appends, in-place changes, pops, inserts: each part equals build_tree, all objects stored."""
    parts = AppendParts()
    rec = _FakeRecorder()
    items: list[Any] = []
    for n, (op, a, b) in enumerate(steps):
        if op == "append":
            items.extend({"role": "user", "content": "c" * b, "n": n + i} for i in range(a))
        elif op == "change" and items:
            items[a % len(items)]["content"] = "changed " * (b // 8)  # in place
        elif op == "pop":
            del items[-a:]
        elif op == "insert":
            items.insert(a % (len(items) + 1), {"content": "i" * b})
        elif op == "clear":
            items.clear()
        data = encode_value(items)
        if len(data) <= TREE_THRESHOLD:
            continue
        chunked: dict[str, Any] = {}
        whole = parts.blob(rec, "messages", data, chunked)
        full = build_tree(data, canonical=True)
        assert (whole, chunked["messages"]) == (full.whole, full.root)
        if drop and n % 3 == 1:
            rec._pending, rec._chunks = {}, []  # a commit that never happened
            continue
        rec.commit(chunked)
        for key, node in full.nodes.items():
            assert rec.stored[key] == node
        for fkey, start, end in full.chunks:
            assert rec.stored[fkey] == encode_frame(data[start:end])


def test_copies_and_pickles_of_a_log_never_share_its_buffer() -> None:
    """copy, deepcopy and pickle give independent logs: appending to one leaves the other."""
    log = AppendLog(_history(3))
    for other in (copy.copy(log), copy.deepcopy(log), pickle.loads(pickle.dumps(log))):
        assert other == log
        other.append({"role": "user", "content": "only in the copy"})
        assert len(log) == 3
        assert log.encoding() == encode_value(_history(3))
        assert other.encoding() == encode_value([*_history(3), other[3]])


def test_a_plain_list_changed_in_place_is_stored_as_it_now_is(tmp_path: Path) -> None:
    """An early message edited in place: the next checkpoint's part digest and tree are
    those of the list as it now is, never the previous tree's bytes."""
    msgs = _history(40)
    with cpstore.open(tmp_path / "a", durability="none") as st:
        rec = st.recorder("chat")
        for i in range(30):
            rec.checkpoint(i, {"messages": msgs[: i + 1]})
        msgs[2]["content"] = "edited in place"
        cid = rec.checkpoint(30, {"messages": msgs[:31]})
        want = build_tree(encode_value(msgs[:31]), canonical=True)
        with st.read(cid) as cp:
            assert _messages(cp)[2]["content"] == "edited in place"
            state = cp.manifest.raw["state"]
            assert state["parts"]["messages"] == want.whole
            assert state["chunked"]["messages"] == want.root
        assert st.verify().ok


def test_state_digest_of_a_state_holding_a_log_is_the_checkpoints(tmp_path: Path) -> None:
    """cpstore.state_digest treats an AppendLog as its list: the digest the checkpoint records."""
    msgs = _history(12)
    log = AppendLog(msgs)
    with cpstore.open(tmp_path / "s", durability="none") as st:
        cid = st.recorder("chat").checkpoint(0, {"messages": log, "n": 1})
        with st.read(cid) as cp:
            recorded = cp.manifest.state_digest
    assert cpstore.state_digest({"messages": log, "n": 1}) == recorded
    assert cpstore.state_digest({"messages": msgs, "n": 1}) == recorded


def _pause_mid_append(
    log: AppendLog, item: Any
) -> tuple[threading.Thread, threading.Event, threading.Event, list[BaseException]]:
    """Start a thread appending ``item``, paused after the bytes grew, before the end is kept."""
    paused, resume = threading.Event(), threading.Event()
    errors: list[BaseException] = []
    code = AppendLog.append.__code__

    def local(frame: FrameType, event: str, arg: Any) -> Any:
        line = linecache.getline(frame.f_code.co_filename, frame.f_lineno)
        if event == "line" and "self._ends.append" in line:
            paused.set()
            resume.wait(10)
        return local

    def tracer(frame: FrameType, event: str, arg: Any) -> Any:
        return local if frame.f_code is code else None

    def run() -> None:
        gc.disable()  # collector off while hooked: tests/trace_interrupts.py
        sys.settrace(tracer)
        try:
            log.append(item)
        except BaseException as exc:  # handed to the test
            errors.append(exc)
        finally:
            sys.settrace(None)
            gc.enable()

    thread = threading.Thread(target=run)
    thread.start()
    assert paused.wait(10)
    return thread, paused, resume, errors


@pytest.mark.parametrize("size", [10, TREE_THRESHOLD])
def test_a_checkpoint_racing_an_append_in_another_thread_stores_whole_elements(
    tmp_path: Path, size: int
) -> None:
    """A checkpoint taken while another thread is mid-append stores a readable prefix."""
    first = ["a" * size, "b" * size]
    log = AppendLog(first)
    appender, _, resume, errors = _pause_mid_append(log, "c" * size)
    got: list[Any] = []

    def checkpoint() -> None:
        try:
            with cpstore.open(tmp_path / "s", durability="none") as st:
                cid = st.recorder("chat").checkpoint(0, {"messages": log})
                with st.read(cid) as cp:
                    got.append(_messages(cp))
        except BaseException as exc:  # handed to the test
            got.append(exc)

    writer = threading.Thread(target=checkpoint)
    writer.start()
    writer.join(1.0)  # a checkpoint that does not wait for the append runs in the gap now
    resume.set()
    appender.join()
    writer.join()
    assert errors == []
    assert got in ([first], [[*first, "c" * size]])
    assert log.to_list() == [*first, "c" * size]


def test_two_threads_appending_at_once_keep_every_element_whole() -> None:
    """An append landing between another's bytes and its end offset splits no element."""
    log = AppendLog(["a"])
    first, _, resume, errors = _pause_mid_append(log, "first")
    second = threading.Thread(target=log.append, args=("second",))
    second.start()
    second.join(1.0)
    resume.set()
    first.join()
    second.join()
    assert errors == []
    assert sorted(log) == ["a", "first", "second"]
    assert log.encoding() == encode_value(log.to_list())


def test_an_append_while_a_checkpoint_holds_the_log_waits_instead_of_failing() -> None:
    """append from another thread during log_view lands after it (no BufferError)."""
    log = AppendLog(["a"])
    errors: list[BaseException] = []

    def append() -> None:
        try:
            log.append("b")
        except BaseException as exc:  # handed to the test
            errors.append(exc)

    thread = threading.Thread(target=append)
    with log_view(log) as (header, body, _):
        thread.start()
        thread.join(0.5)
        assert header + bytes(body) == encode_value(["a"])
    thread.join()
    assert errors == []
    assert log.to_list() == ["a", "b"]


def test_calling_init_again_on_a_log_is_refused_and_later_checkpoints_stay_readable(
    tmp_path: Path,
) -> None:
    """AppendLog.__init__ on a live log would rewrite its bytes: refused, the log unchanged."""
    msgs = _history(40)
    with cpstore.open(tmp_path / "s", durability="none") as st:
        rec = st.recorder("chat")
        log = AppendLog(msgs)
        rec.checkpoint(0, {"messages": log})
        with pytest.raises(InvalidInputError):
            AppendLog.__init__(log, _history(41)[::-1])
        assert log.to_list() == msgs
        log.append({"role": "user", "content": "more"})
        cid = rec.checkpoint(1, {"messages": log})
        with st.read(cid) as cp:
            assert _messages(cp) == [*msgs, {"role": "user", "content": "more"}]
        assert st.verify().ok


def _prune_and_sweep(path: str, step: int) -> int:
    """In another process: keep each branch's newest checkpoint, sweep, and churn a run."""
    with cpstore.open(path, durability="none") as st:
        other = st.recorder(f"other-{step}")
        other.checkpoint(0, {"x": [random.Random(step).randbytes(3000)]})
        st.delete_run(f"other-{step}")
        return len(st.gc(keep_last=1).checkpoints) if step % 2 else st.prune(keep_last=1)


def test_prune_and_gc_in_another_process_between_puts_never_strand_a_continued_tree(
    tmp_path: Path,
) -> None:
    """Continued trees (a log and a plain list) stay whole across sweeps run by another process."""
    path = str(tmp_path / "s")
    msgs = _history(40)
    ctx = multiprocessing.get_context("spawn")
    with cpstore.open(path, durability="none") as st, ctx.Pool(1) as pool:
        rec = st.recorder("chat")
        log = AppendLog()
        for i, m in enumerate(msgs):
            log.append(m)
            cid = rec.checkpoint(i, {"messages": log, "plain": msgs[: i + 1]})
            pool.apply(_prune_and_sweep, (path, i))
        assert st.verify().ok
        with st.read(cid) as cp:
            state = cp.state()
        assert isinstance(state, dict)
        assert state["messages"] == state["plain"] == msgs


def _child_appends(log: AppendLog, before: list[Any]) -> int:
    """In a forked child: 0 when the log reads ``before`` and an append lands (no deadlock)."""
    done = threading.Event()

    def append() -> None:
        log.append("child")
        done.set()

    threading.Thread(target=append, daemon=True).start()
    ok = done.wait(5) and log.to_list() == [*before, "child"]
    return 0 if ok and log.encoding() == encode_value([*before, "child"]) else 1


@pytest.mark.skipif(not hasattr(os, "fork"), reason="fork() only")
@pytest.mark.parametrize("holder", ["checkpoint", "append"])
def test_a_child_forked_while_another_thread_holds_the_log_appends_to_whole_elements(
    holder: str,
) -> None:
    """fork() during a checkpoint's read of the log, or mid-append: the child's log works."""
    log = AppendLog(["a"])
    release = threading.Event()
    if holder == "checkpoint":
        held = threading.Event()

        def hold() -> None:
            with log_view(log):
                held.set()
                release.wait(10)

        thread = threading.Thread(target=hold)
        thread.start()
        assert held.wait(10)
    else:
        thread, _, release, _ = _pause_mid_append(log, "half")
    pid = os.fork()
    if pid == 0:  # pragma: no cover - the child reports through its exit code
        code = 1
        try:
            code = _child_appends(log, ["a"])
        finally:
            os._exit(code)
    release.set()
    thread.join()
    _, status = os.waitpid(pid, 0)
    assert os.waitstatus_to_exitcode(status) == 0
    assert log.to_list() == (["a"] if holder == "checkpoint" else ["a", "half"])
