"""Deterministic, realistic chat text for the chat-workload benchmarks (issue 16).

A word-bigram chain trained on the repository's own docs (docs/*.md, README.md)
writes messages of real English and Markdown vocabulary with real word
frequencies, so compression and chunking see text as an agent would, and
no two messages repeat (random bytes would hide compression; copied docs
would repeat and flatter deduplication). Same seed, same text.
"""

from __future__ import annotations

import itertools
import random
import re
from collections import defaultdict
from functools import cache
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
#: Target size of one message, in UTF-8 bytes.
MESSAGE_BYTES = 1024


@cache
def _chain() -> tuple[dict[str, list[str]], list[str]]:
    text = "\n".join(
        p.read_text(encoding="utf-8") for p in sorted([*ROOT.glob("docs/*.md"), ROOT / "README.md"])
    )
    words = re.findall(r"\S+", text)
    follow: dict[str, list[str]] = defaultdict(list)
    for a, b in itertools.pairwise(words):
        follow[a].append(b)
    return dict(follow), words


def messages(count: int, seed: int = 16, size: int = MESSAGE_BYTES) -> list[str]:
    """``count`` messages of about ``size`` bytes of chained real words."""
    follow, words = _chain()
    rng = random.Random(seed)
    out = []
    for _ in range(count):
        word = rng.choice(words)
        parts: list[str] = []
        length = 0
        while length < size:
            parts.append(word)
            length += len(word.encode()) + 1
            nxt = follow.get(word)
            word = rng.choice(nxt) if nxt else rng.choice(words)
        out.append(" ".join(parts)[:size])
    return out


def chat_states(steps: int, seed: int = 16) -> tuple[list[dict[str, list[dict[str, str]]]], int]:
    """Each step's state (the history so far, one message appended per step) and the
    unique message bytes (the sum of the messages' UTF-8 sizes)."""
    texts = messages(steps, seed)
    history: list[dict[str, str]] = []
    states = []
    for i, text in enumerate(texts):
        history = [*history, {"role": "user" if i % 2 == 0 else "assistant", "content": text}]
        states.append({"messages": history})
    return states, sum(len(t.encode()) for t in texts)
