"""cpstore as a LangGraph checkpointer (``pip install cpstore[langgraph]``).

``CpstoreSaver`` (sync, with async twins) and ``AsyncCpstoreSaver`` store
LangGraph checkpoints as content-addressed, verified cpstore checkpoints;
``diff_threads`` names where two threads diverge. See docs/langgraph.md.
"""

from cpstore.langgraph.diff import ThreadDiff, diff_threads
from cpstore.langgraph.saver import AsyncCpstoreSaver, CpstoreSaver

__all__ = ["AsyncCpstoreSaver", "CpstoreSaver", "ThreadDiff", "diff_threads"]
