"""A one-node graph whose state is a DeltaChannel (a snapshot every 4 updates, or every
1000), for tests that run it in another process too."""

from __future__ import annotations

from typing import Annotated, Any, TypedDict

from langgraph.channels.delta import DeltaChannel
from langgraph.graph import END, START, StateGraph


def concat(state: list[str] | None, writes: Any) -> list[str]:
    out = list(state or [])
    for w in writes:
        out.extend(w)
    return out


class Delta(TypedDict):
    log: Annotated[list[str], DeltaChannel(concat, snapshot_frequency=4)]


class Rare(TypedDict):
    log: Annotated[list[str], DeltaChannel(concat, snapshot_frequency=1000)]


def graph(cp: Any, *, rare: bool = False) -> Any:
    """The compiled graph on checkpointer ``cp``: each run appends its input and one node's
    line; ``rare``: a snapshot every 1000 updates (none in a test's few runs)."""
    g = StateGraph(Rare if rare else Delta)
    g.add_node("step", lambda s: {"log": [f"n{len(s['log'])}"]})
    g.add_edge(START, "step")
    g.add_edge("step", END)
    return g.compile(checkpointer=cp)
