"""review95: an interrupt landing where a released kept read is handed over and ended.

A slice kept past its block keeps the read open (slices93); once released, the next read
hands the read over (``kept_views.settle``) as a lost read and ends it (``_end_lost``,
which since review95 frees every unused txn object). A signal handler's exception lands
on the return of any call there: wherever it lands, the read must end by the next read
(nothing kept, lost or counted as open left), and a close must close.
"""

from __future__ import annotations

import gc
from pathlib import Path
from typing import Any

from test_begin_interrupted import interrupted_at, sweep_landings

import cpstore

_FRAMES = {
    "settle",
    "EnvTxns.begin_read",
    "EnvTxns._end_lost",
    "EnvTxns._drop_unused_txns",
    "LmdbBackend.begin_read",
    "CheckpointView.__enter__",
}


def test_an_interrupt_anywhere_in_the_handover_leaves_no_read_open(tmp_path: Path) -> None:
    st: Any = cpstore.open(tmp_path / "s", map_size=64 << 20)
    env = st._backend.env
    rec = st.recorder("r")
    for i in range(40):
        rec.token("rng", f"value {i}")
    cid = str(rec.checkpoint(0, {"a": 1}))
    rec.close()

    def interrupt(k: int) -> list[str]:
        with st.read(cid) as cp:
            kept = cp.token_value_views()[0][1:]
        del kept  # released: the next read hands it over and ends it

        def block() -> None:
            with st.read(cid) as cp:
                assert cp.token_count() == 40

        return interrupted_at(k, _FRAMES, block, qualified=True)

    def left_wrong() -> str | None:
        gc.collect()
        with st.read(cid):  # this thread's next read ends what is left
            pass
        if env.kept or env._lost or env._active:
            return f"left kept={list(env.kept)} lost={list(env._lost)} active={list(env._active)}"
        slots = len(env.env.readers().splitlines()) - 1
        return None if slots < 8 else f"{slots} reader slots held"

    try:
        assert sweep_landings(interrupt, left_wrong, at_least=10) == []
    finally:
        st.close()  # raises "left open" if a read was left
    assert env.closed
