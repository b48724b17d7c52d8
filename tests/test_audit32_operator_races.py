"""audit32: operator commands beside other processes, each put into its window. Looking
commands given a name (RUN@BRANCH, RUN@BRANCH~N) while other
processes record and collect, on LMDB and PostgreSQL.

A name is resolved to an id, then the checkpoint read; between the two, another process
may move the branch and a gc in a third prune the checkpoint resolved. The command must
read what the name names then, not answer "checkpoint was pruned" (exit 4) for a branch
that exists. Also: a push whose receiving branch another process moves mid-transfer,
and sign-off commands racing for one decision. The tests put real processes (spawn)
exactly into each window.

The commands run their reads in a forked child (cli.child.reads_in_child, damage98: a
damaged page's SIGBUS is exit 5, not a silent death), where the monkeypatched hooks run
too: what a hook did is noted in a file (:class:`_Notes`), which the test reads back.
"""

from __future__ import annotations

import json
import multiprocessing
from pathlib import Path
from typing import Any

import pytest
from pg_cluster import backend_url, pg_cluster  # noqa: F401 - fixtures
from test_keyed_audit import _quarantined

import cpstore
from cpstore import cli
from cpstore.store.facade import Store


def _advance_and_collect(url: str, step: int) -> str:
    """In its own process: a new head on run-a/main, then gc keeping only it."""
    with cpstore.open(url) as store:
        head = store.recorder("run-a").checkpoint(step, {"step": step})
        report = store.gc(keep_last=1)
        assert report.checkpoints, "the gc pruned nothing"
    return head


def _in_another_process(url: str, step: int) -> str:
    ctx = multiprocessing.get_context("spawn")
    with ctx.Pool(1) as pool:
        head: str = pool.apply(_advance_and_collect, (url, step))
    return head


def _record(url: str, steps: int) -> list[str]:
    with cpstore.open(url) as store:
        rec = store.recorder("run-a")
        rec.transcript(b"the answer")
        return [rec.checkpoint(i, {"step": i}) for i in range(steps)]


class _Notes:
    """A list of str kept in a file: a hook running in the command's child (a fork of this
    process) appends, and the test reads back what it appended."""

    def __init__(self, path: Path) -> None:
        self.path = path
        path.write_text("")

    def append(self, value: str) -> None:
        with self.path.open("a") as fh:
            fh.write(value + "\n")

    def _all(self) -> list[str]:
        return self.path.read_text().splitlines()

    def __getitem__(self, i: int) -> str:
        return self._all()[i]

    def __len__(self) -> int:
        return len(self._all())


class _Between:
    """Patches Store.resolve: after its first ``times`` answers (in each process the
    command runs in), another process moves run-a/main and prunes everything but the new
    head (what the name then names); ``heads`` notes those heads."""

    def __init__(self, url: str, notes: Path, times: int = 1) -> None:
        self.url, self.left, self.heads = url, times, _Notes(notes)
        self.real = Store.resolve

    def install(self, monkeypatch: pytest.MonkeyPatch) -> _Between:
        def patched(store: Store, name: str) -> str:  # a function: Store binds it
            return self.resolve(store, name)

        monkeypatch.setattr(Store, "resolve", patched)
        return self

    def resolve(self, store: Store, name: str) -> str:
        cid = self.real(store, name)
        if self.left > 0:
            self.left -= 1
            self.heads.append(_in_another_process(self.url, 100 + len(self.heads)))
        return cid


def _run(argv: list[str], capsys: pytest.CaptureFixture[str]) -> tuple[int, str, str]:
    code = cli.main(argv)
    out, err = capsys.readouterr()
    return code, out, err


@pytest.mark.parametrize("name", ["run-a@main", "run-a@main~0"])
def test_inspect_and_cat_of_a_branch_pruned_between_resolve_and_read(
    url: str,
    name: str,
    tmp_path: Path,
    capsys: pytest.CaptureFixture[str],
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """inspect/cat RUN@BRANCH read the head the branch has once the read begins."""
    _record(url, 3)
    between = _Between(url, tmp_path / "heads").install(monkeypatch)
    code, out, err = _run(["inspect", name, "--json", "--store", url], capsys)
    assert code == 0, (code, err)
    assert len(between.heads) == 1 and json.loads(out)["checkpoint_id"] == between.heads[0]
    between.left = 1  # cat reads here: its resolve moves the branch again
    code, out, err = _run(["cat", name, "tokens", "--json", "--store", url], capsys)
    assert code == 0 and json.loads(out) == [], (code, err)
    assert len(between.heads) == 2  # the move happened between cat's resolve and read


def test_diff_of_names_pruned_between_resolve_and_read(
    url: str, tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    """diff RUN@BRANCH~1 RUN@BRANCH compares what both name once read (exit 12)."""
    _record(url, 3)
    between = _Between(url, tmp_path / "heads").install(monkeypatch)
    code, out, err = _run(["diff", "run-a@main", "run-a@main", "--json", "--store", url], capsys)
    assert code == 0, (code, err)
    data: dict[str, Any] = json.loads(out)
    assert len(between.heads) == 1
    assert data["a"] == data["b"] == between.heads[-1] and not data["differs"]


def test_a_full_id_pruned_before_the_read_is_still_not_found(
    url: str, tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    """An id names one checkpoint: pruned, it is exit 4 "pruned", never another one."""
    ids = _record(url, 3)
    between = _Between(url, tmp_path / "heads").install(monkeypatch)
    code, _, err = _run(["inspect", ids[-1], "--store", url], capsys)
    assert code == cli.EXIT_NOT_FOUND and "pruned" in err, (code, err)
    assert len(between.heads) == 1  # pruned between the resolve and the read


def _record_on(url: str, run: str, step: int) -> str:
    """In its own process: one checkpoint on ``run``/main (the destination's own writer)."""
    with cpstore.open(url) as store:
        return store.recorder(run).checkpoint(step, {"theirs": step})


def test_a_receiving_branch_moved_during_a_push_is_named_and_the_others_still_land(
    url: str,
    tmp_path: Any,
    capsys: pytest.CaptureFixture[str],
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """The destination's own writer moves branch a/main after the push read it: exit 8
    naming a/main, a/main as that writer left it, and b/main landed as push --help says
    ("the other branches still land"). Before, the push stopped at a/main and b/main
    never landed."""
    from cpstore.store import transfer as transfer_module  # noqa: PLC0415

    src = str(tmp_path / "src")
    with cpstore.open(src) as store:
        store.recorder("a").checkpoint(0, {"a": 0})
    code, _, err = _run(["push", url, "--store", src], capsys)
    assert code == 0, err
    with cpstore.open(src) as store:
        store.recorder("a").checkpoint(1, {"a": 1})
        b_head = store.recorder("b").checkpoint(0, {"b": 0})
    real = transfer_module._land_branch
    moved = _Notes(tmp_path / "moved")  # the push's landing runs in its child

    def land(src_b: Any, dst_b: Any, branch: Any, **kwargs: Any) -> str:
        if not moved:  # a/main lands first (key order): the other writer goes in between
            ctx = multiprocessing.get_context("spawn")
            with ctx.Pool(1) as pool:
                moved.append(pool.apply(_record_on, (url, "a", 7)))
        out: str = real(src_b, dst_b, branch, **kwargs)
        return out

    monkeypatch.setattr(transfer_module, "_land_branch", land)
    code, _, err = _run(["push", url, "--store", src], capsys)
    assert code == cli.EXIT_CONFLICT and "a/main" in err, (code, err)
    assert len(moved) == 1
    with cpstore.open(url, readonly=True) as store:
        assert store.ref("a", "main") == moved[0]
        assert store.ref("b", "main") == b_head, "b/main did not land"
        assert store.verify().ok


def _sign_off_cli(url: str, decision_id: str, operator: str) -> tuple[int, str]:
    """In its own process: `cpstore sign-off` (exit code, stderr)."""
    import subprocess  # noqa: PLC0415
    import sys  # noqa: PLC0415

    got = subprocess.run(
        [
            *(sys.executable, "-m", "cpstore.cli", "sign-off", decision_id[:12]),
            *("--operator", operator, "--reason", "checked", "--store", url),
        ],
        capture_output=True,
        text=True,
        timeout=300,
        check=False,
    )
    return got.returncode, got.stderr


def test_racing_sign_off_commands_land_exactly_one_on_each_backend(url: str) -> None:
    """Four `cpstore sign-off` processes of one decision (by a 12-hex prefix) at once, on
    LMDB and PostgreSQL: exactly one exits 0, the others 6 "already signed off", and the
    log holds one sign-off (the check and the append are one write txn)."""
    with cpstore.open(url) as store:
        _, decision = _quarantined(store)
    ctx = multiprocessing.get_context("spawn")
    with ctx.Pool(4) as pool:
        results = pool.starmap(_sign_off_cli, [(url, decision.id, f"op{i}") for i in range(4)])
    codes = sorted(code for code, _ in results)
    assert codes == [0, cli.EXIT_REFUSED, cli.EXIT_REFUSED, cli.EXIT_REFUSED], results
    assert all(code == 0 or "already signed off" in err for code, err in results), results
    with cpstore.open(url, readonly=True) as store:
        signed = list(store.audit_records(kind="signoff"))
        assert len(signed) == 1 and signed[0].body["decision_id"] == decision.id
        assert store.verify().ok
