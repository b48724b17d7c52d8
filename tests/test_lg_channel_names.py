"""The Loader's part-name -> channel lookup (``_loader._channel_of``): the same answer as
the prefix test and slice it replaces, for any name, and a bounded table of names only."""

from __future__ import annotations

from hypothesis import given
from hypothesis import strategies as st

from cpstore.langgraph import _loader
from cpstore.langgraph._codec import CHANNEL


@given(st.one_of(st.text(max_size=40), st.text(max_size=40).map(lambda t: CHANNEL + t)))
def test_channel_of_is_the_prefix_test_and_slice(name: str) -> None:
    want = name[len(CHANNEL) :] if name.startswith(CHANNEL) else None
    assert _loader._channel_of(name) == want
    assert _loader._channel_of(name) == want  # the kept answer is the same one


def test_channel_of_keeps_a_bounded_table_and_no_long_name() -> None:
    _loader._CHANNELS.clear()
    long = CHANNEL + "x" * (_loader._CHANNEL_NAME_MAX + 1)
    assert _loader._channel_of(long) == long[len(CHANNEL) :]
    assert long not in _loader._CHANNELS
    for i in range(_loader._CHANNELS_MAX + 10):
        assert _loader._channel_of(f"{CHANNEL}c{i}") == f"c{i}"
        assert len(_loader._CHANNELS) <= _loader._CHANNELS_MAX
    assert _loader._channel_of("segment/c/0") is None
    assert _loader._channel_of("checkpoint") is None
