"""Tree reads inflate and hash all their frames in one pass (codec.frame_sizes and
inflate_frames, chunk_tree._Frames): same bytes and same checks as reading frame by
frame, and a damaged or missing frame anywhere in the batch is still named."""

from __future__ import annotations

import contextlib
import random
from typing import Any, cast

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from cpstore.errors import IntegrityError
from cpstore.native.binding import digest
from cpstore.native.canonical import encode_value
from cpstore.store.chunk_tree import build_tree, load_tree, read_node
from cpstore.store.codec import (
    CODEC_STORED,
    CODEC_ZSTD,
    MAX_FRAME_CONTENT,
    encode_frame,
    frame_sizes,
    inflate_frames,
    read_frame,
)
from cpstore.store.content import objects_of

PROPERTY = settings(max_examples=80, deadline=None, suppress_health_check=[HealthCheck.too_slow])
WORDS = ["state", "chunk", "frame", "agent", "message", "tool", "result", "the", "of", "\n"]


#: Objects read straight from a table (no heap): what a fake txn's dict stands in for.
_DIRECT = objects_of({"objects": None})


class _Txn:
    """The one read a tree walk makes: ``get(key, default, db)`` over a dict."""

    def __init__(self, objects: dict[bytes, bytes]) -> None:
        self.objects = objects

    def get(self, key: bytes, default: Any = None, db: Any = None) -> memoryview | None:
        value = self.objects.get(bytes(key))
        return default if value is None else memoryview(value)


@st.composite
def chunks(draw: st.DrawFn) -> list[bytes]:
    """1-40 chunks: compressible text (zstd frames), random bytes and tiny ones (stored)."""
    out = []
    for _ in range(draw(st.integers(1, 40))):
        kind = draw(st.sampled_from(["text", "random", "tiny"]))
        rng = random.Random(draw(st.integers(0, 2**32)))
        if kind == "text":
            out.append(" ".join(rng.choices(WORDS, k=rng.randint(20, 400))).encode())
        elif kind == "random":
            out.append(rng.randbytes(rng.randint(64, 3000)))
        else:
            out.append(rng.randbytes(rng.randint(1, 63)))
    return out


@PROPERTY
@given(parts=chunks())
def test_batch_inflate_equals_frame_by_frame_reads(parts: list[bytes]) -> None:
    """Any mix of stored and zstd frames: the batch gives each chunk, as read_frame does."""
    frames = [memoryview(encode_frame(p)) for p in parts]
    sizes = frame_sizes(frames)
    assert sizes == [len(p) for p in parts]
    keys = [digest(p) for p in parts]
    out = inflate_frames(frames, sizes, b"".join(keys))
    assert out == parts
    assert out == [read_frame(k, f, "x") for k, f in zip(keys, frames, strict=True)]
    assert inflate_frames(frames, sizes, None) == parts


@PROPERTY
@given(parts=chunks(), data=st.data())
def test_a_damaged_frame_in_a_batch_never_passes_and_read_frame_names_it(
    parts: list[bytes], data: st.DataObject
) -> None:
    """One flipped byte in one frame of a batch: the batch returns the true chunks or None,
    and when None, reading that frame alone raises (so the tree read can name it)."""
    frames = [encode_frame(p) for p in parts]
    victim = data.draw(st.integers(0, len(frames) - 1))
    bad = bytearray(frames[victim])
    bad[data.draw(st.integers(0, len(bad) - 1))] ^= 1 << data.draw(st.integers(0, 7))
    frames[victim] = bytes(bad)
    keys = [digest(p) for p in parts]
    views = [memoryview(f) for f in frames]
    sizes = frame_sizes(views)
    out = None if sizes is None else inflate_frames(views, sizes, b"".join(keys))
    if out is not None:
        assert out == parts
        return
    with pytest.raises(IntegrityError):
        read_frame(keys[victim], views[victim], "x")
    for i, (k, v) in enumerate(zip(keys, views, strict=True)):
        if i != victim:
            assert read_frame(k, v, "x") == parts[i]


def test_frame_sizes_refuses_empty_missing_short_and_oversized_headers() -> None:
    """Headers the batch cannot trust give None (the frame-by-frame read then names them)."""
    good = encode_frame(b"text " * 100)
    assert good[0] == CODEC_ZSTD
    over = bytes([CODEC_ZSTD]) + (MAX_FRAME_CONTENT + 1).to_bytes(4, "little") + good[5:]
    for bad in (b"", bytes([CODEC_ZSTD, 1, 2]), bytes([7]) + good[1:], over):
        assert frame_sizes([memoryview(good), memoryview(bad)]) is None
    assert frame_sizes([memoryview(good), None]) is None
    assert frame_sizes([bytes([CODEC_STORED])]) == [0]


def test_zstd_header_disagreeing_with_declared_size_fails_the_batch_before_inflating() -> None:
    """A declared size that is not the zstd header's is refused (nothing is inflated)."""
    frame = encode_frame(b"text " * 100)
    lie = frame[:1] + (400).to_bytes(4, "little") + frame[5:]
    assert frame_sizes([lie]) == [400]
    assert inflate_frames([lie], [400], None) is None


def _tree(parts: int = 60) -> tuple[dict[bytes, bytes], bytes, bytes, bytes, list[bytes]]:
    """A chunk tree of a list of ~1 KB texts in a dict: (objects, root, whole, data, frame keys)."""
    rng = random.Random(16)
    value = [" ".join(rng.choices(WORDS, k=200)) for _ in range(parts)]
    data = encode_value(value)
    tree = build_tree(data, canonical=True)
    objects = dict(tree.nodes)
    for fkey, a, b in tree.chunks:
        objects[fkey] = encode_frame(data[a:b])
    return objects, tree.root, tree.whole, data, [f for f, _, _ in tree.chunks]


def test_tree_read_through_the_batch_returns_the_value() -> None:
    """A multi-level tree of compressed frames reads back, verified or not."""
    objects, root, whole, data, fkeys = _tree()
    assert len(fkeys) > 20
    txn = cast(Any, _Txn(objects))
    for verify in (True, False):
        assert load_tree(txn, _DIRECT, root, whole, verify=verify, where="state.m") == data


@pytest.mark.parametrize("victim", [0, 17, -1])
def test_a_damaged_frame_inside_the_batch_is_named_by_its_key(victim: int) -> None:
    """A frame whose content was swapped for another valid frame fails the verified read, and
    the error names that frame's key (not the first or last of the batch)."""
    objects, root, whole, _, fkeys = _tree()
    key = fkeys[victim]
    objects[key] = encode_frame(b"not the chunk this key names " * 10)
    with pytest.raises(IntegrityError, match="does not match its digest") as info:
        load_tree(cast(Any, _Txn(objects)), _DIRECT, root, whole, verify=True, where="state.m")
    assert f"objects/{key.hex()}" in str(info.value.where)


def test_a_corrupt_zstd_frame_inside_the_batch_is_named_unverified_too() -> None:
    """Bytes flipped inside a compressed frame: refused even unverified, naming the frame."""
    objects, root, whole, _, fkeys = _tree()
    key = fkeys[9]
    bad = bytearray(objects[key])
    assert bad[0] == CODEC_ZSTD
    bad[5:9] = b"\0\0\0\0"  # the zstd magic number
    objects[key] = bytes(bad)
    with pytest.raises(IntegrityError, match="zstd header") as info:
        load_tree(cast(Any, _Txn(objects)), _DIRECT, root, whole, verify=False, where="state.m")
    assert f"objects/{key.hex()}" in str(info.value.where)


def test_a_missing_frame_inside_the_batch_is_named() -> None:
    """A frame absent from the store: 'chunk not in the store' with that chunk's digest."""
    objects, root, whole, _, fkeys = _tree()
    del objects[fkeys[30]]
    with pytest.raises(IntegrityError, match="chunk not in the store") as info:
        load_tree(cast(Any, _Txn(objects)), _DIRECT, root, whole, verify=True, where="state.m")
    assert info.value.got == fkeys[30][:16].hex()


def test_the_error_names_the_node_that_lists_the_damaged_frame() -> None:
    """Errors from the batch carry the path of the level-1 node holding the frame."""
    objects, root, whole, _, fkeys = _tree(120)
    listing = {}
    for key, raw in objects.items():
        if len(key) == 16 and key != root:
            with contextlib.suppress(IntegrityError):
                level, _, entries = read_node(raw, "")
                if level == 1:
                    listing.update({e: key for e in entries})
    victims = [f for f in fkeys if f[:16] in listing]
    assert len(victims) > 10
    for victim in (victims[0], victims[len(victims) // 2], victims[-1]):
        damaged = dict(objects)
        damaged[victim] = encode_frame(b"another chunk " * 20)
        with pytest.raises(IntegrityError) as info:
            load_tree(cast(Any, _Txn(damaged)), _DIRECT, root, whole, verify=True, where="state.m")
        where = str(info.value.where)
        assert where.endswith(f"node {listing[victim[:16]].hex()} (objects/{victim.hex()})")
