"""Hostile input: every decoder and the CLI meet garbage and raise only documented errors.

Decoders: run documents (JSON and msgpack), canonical values, packed logs
(``first_divergence``/``scan_tokens``), and manifests/objects/audit records
written into a store through LMDB directly. The CLI gets garbage files and
arguments: documented exit codes only, one line on stderr, no traceback.
Memory: a document declaring a billion tokens is measured in a child process.
Atheris is not used in the default run (it needs a libFuzzer build per
harness); the hypothesis strategies below are the fuzzing here.
"""

from __future__ import annotations

import contextlib
import io
import json
import os
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

import msgpack
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from stored import edit_raw, raw_items

import cpstore
from cpstore import Effect, Observation, cli
from cpstore.errors import CpstoreError
from cpstore.native.records import RecordType
from cpstore.run.document import _TOP_OPTIONAL, _TOP_REQUIRED

#: Every exit code but 1 (internal error: a bug).
DOCUMENTED_EXITS = {0, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11}
SOAK = bool(__import__("os").environ.get("CPSTORE_SOAK"))
FAST = settings(max_examples=150, deadline=None, suppress_health_check=list(HealthCheck))

json_values = st.recursive(
    st.none() | st.booleans() | st.integers() | st.floats() | st.text(max_size=8),
    lambda c: st.lists(c, max_size=4) | st.dictionaries(st.text(max_size=8), c, max_size=4),
    max_leaves=20,
)
DOC_KEYS = [*_TOP_REQUIRED, *_TOP_OPTIONAL]  # every key a run document may carry
documents = st.dictionaries(
    st.sampled_from(DOC_KEYS) | st.text(max_size=5), json_values, max_size=14
)


class TestDocuments:
    @FAST
    @given(st.binary(max_size=300))
    def test_garbage_bytes_raise_only_cpstore_errors(self, data: bytes) -> None:
        """load_document on any bytes returns a Run or raises a CpstoreError."""
        with contextlib.suppress(CpstoreError):
            cpstore.load_document(data)

    @FAST
    @given(documents)
    def test_garbage_mappings_raise_only_cpstore_errors(self, doc: dict[str, Any]) -> None:
        """parse_document, and load_document of its JSON and msgpack forms, fail only cleanly."""
        attempts: tuple[Callable[[], object], ...] = (
            lambda: cpstore.parse_document(doc),
            lambda: cpstore.load_document(json.dumps(doc).encode()),
            lambda: cpstore.load_document(msgpack.packb(doc)),
        )
        for attempt in attempts:
            with contextlib.suppress(CpstoreError, ValueError, OverflowError):
                attempt()

    def test_a_billion_declared_tokens_are_not_allocated(self) -> None:
        """A 30-byte msgpack doc declaring 10^9 tokens peaks under 20 MiB RSS growth."""
        code = r"""
import resource, msgpack, cpstore
from cpstore.errors import CpstoreError
head = msgpack.packb({"format": 1, "run_id": "r", "step": 0, "state_digest": "s",
                      "observations": [], "call_graph": [], "transcript_digest": None,
                      "effects": []})
doc = (bytes([head[0] + 1]) + head[1:] + msgpack.packb("tokens")
       + b"\xdd" + (10**9).to_bytes(4, "big"))
before = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
try:
    cpstore.load_document(doc)
except CpstoreError:
    pass
print(resource.getrusage(resource.RUSAGE_SELF).ru_maxrss - before)
"""
        out = subprocess.run(
            [sys.executable, "-c", code], capture_output=True, text=True, timeout=60, check=False
        )
        assert out.returncode == 0, out.stderr
        assert int(out.stdout) < 20 * 1024, out.stdout  # KiB


class TestCanonicalAndPackedLogs:
    @FAST
    @given(st.binary(max_size=200))
    def test_decode_value_on_garbage(self, data: bytes) -> None:
        """decode_value accepts only canonical bytes and fails with CanonicalEncodingError."""
        try:
            value = cpstore.native.decode_value(data)
        except cpstore.errors.CanonicalEncodingError:
            return
        assert cpstore.native.encode_value(value) == data

    @FAST
    @given(st.binary(max_size=400), st.binary(max_size=400))
    def test_packed_logs_with_garbage(self, a: bytes, b: bytes) -> None:
        """first_divergence and scan_tokens: a result or RecordFormatError, never a crash."""
        for rt in RecordType:
            with contextlib.suppress(cpstore.errors.RecordFormatError):
                cpstore.native.first_divergence(rt, a, b)
        with contextlib.suppress(cpstore.errors.RecordFormatError):
            cpstore.native.scan_tokens(a)


STORE_PROBE = r"""
import sys, json, traceback
import cpstore
from cpstore.errors import CpstoreError
path, cid = sys.argv[1], sys.argv[2]
bad = []
with cpstore.open(path, readonly=True) as st:
    def go(what, fn):
        try:
            fn()
        except CpstoreError:
            pass
        except Exception:
            bad.append(what + ": " + traceback.format_exc(limit=2))
    def read():
        with st.read(cid) as cp:
            cp.state(); cp.observations(); cp.effects(); cp.call_graph(); cp.transcript()
    go("read", read)
    go("verify", st.verify)
    go("audit", lambda: list(st.audit_records()))
    go("history", lambda: st.history("run"))
    go("validate", lambda: cpstore.validate(cid, cid, store=st, record=False))
print(json.dumps(bad))
"""


class TestStoredGarbage:
    @settings(
        max_examples=200 if SOAK else 12, deadline=None, suppress_health_check=list(HealthCheck)
    )
    @given(
        st.sampled_from(["checkpoints", "objects", "audit"]),
        st.one_of(st.binary(max_size=80), json_values.map(cpstore.native.encode_value)),
    )
    def test_garbage_manifests_objects_and_audit_records(
        self, tmp_path_factory: pytest.TempPathFactory, db: str, garbage: bytes
    ) -> None:
        """Garbage under a real key: reads, verify, validate raise only CpstoreErrors."""
        path = tmp_path_factory.mktemp("g") / "s"
        with cpstore.open(path) as s:
            rec = s.recorder("run")
            rec.observe(1, "cfg", b"p", pinned_at=1.0)
            cid = rec.checkpoint(1, {"a": 1})
            s.append_audit("note", {})
            with s.backend.env.env.begin() as txn:
                okey = next(iter(raw_items(txn, s.backend.dbs, "objects")))[0]
        key = {"checkpoints": bytes.fromhex(cid), "objects": okey, "audit": bytes(8)}[db]
        value = (b"\0" * 8 + garbage) if db == "checkpoints" else garbage
        edit_raw(path, db, key, lambda _old: value)
        out = subprocess.run(
            [sys.executable, "-c", STORE_PROBE, str(path), cid],
            capture_output=True,
            text=True,
            timeout=60,
            check=False,
        )
        assert out.returncode == 0, out.stderr[-1500:]
        assert json.loads(out.stdout) == [], out.stdout


def _cli(argv: list[str]) -> tuple[int, str]:
    err = io.StringIO()
    with contextlib.redirect_stderr(err), contextlib.redirect_stdout(io.StringIO()):
        try:
            code = cli.main(argv)
        except SystemExit as exc:  # argparse usage errors
            code = int(exc.code or 0)
    return code, err.getvalue()


class TestCli:
    @settings(max_examples=60, deadline=None, suppress_health_check=list(HealthCheck))
    @given(st.binary(max_size=200), st.sampled_from(["validate", "diff"]))
    def test_garbage_documents(
        self, tmp_path_factory: pytest.TempPathFactory, data: bytes, command: str
    ) -> None:
        """Garbage files: a documented exit code and one line on stderr, no traceback."""
        d = tmp_path_factory.mktemp("c")
        (d / "a").write_bytes(data)
        (d / "b").write_bytes(data)
        code, err = _cli([command, str(d / "a"), str(d / "b")])
        assert code in DOCUMENTED_EXITS, (code, err)
        assert "Traceback" not in err
        if code not in (0, 10, 11, 2):
            assert len(err.strip().splitlines()) == 1, err

    @settings(max_examples=60, deadline=None, suppress_health_check=list(HealthCheck))
    @given(
        st.lists(
            st.sampled_from(
                [
                    "validate",
                    "verify",
                    "show",
                    "log",
                    "audit",
                    "stats",
                    "gc",
                    "diff",
                    "--store",
                    "/nonexistent",
                    "--json",
                    "--limit",
                    "-1",
                    "x" * 32,
                    "--kind",
                    "--keep-last",
                    "0",
                    "--help-not",
                    "sign-off",
                    "--operator",
                    "",
                ]
            ),
            max_size=6,
        )
    )
    def test_garbage_arguments(self, argv: list[str]) -> None:
        """Any argument list: a documented exit code, never a traceback."""
        code, err = _cli(argv)
        assert code in DOCUMENTED_EXITS, (argv, code, err)
        assert "Traceback" not in err

    def test_a_nul_in_a_path_argument_is_bad_input(self) -> None:
        """A path with a NUL byte is exit 3 with one line on stderr."""
        code, err = _cli(["validate", "\x00", "validate"])
        assert code == 3 and len(err.strip().splitlines()) == 1


# -- hostile values, field by field -------------------------------------------------

SURROGATE = "\ud800"  # a lone surrogate: a str with no UTF-8 form
DOC: dict[str, Any] = {
    "format": 1,
    "run_id": "r",
    "step": 0,
    "state_digest": "s",
    "observations": [{"step": 0, "source": "cfg", "payload_digest": "p", "pinned_at": 1.0}],
    "tokens": [{"seq": 0, "kind": "rng", "value": 1, "provenance": "recorded"}],
    "call_graph": [],
    "transcript_digest": "t",
    "effects": [{"seq": 0, "target": "db", "payload_digest": "e"}],
    "provenance_tags": ["x"],
}
#: (document path, the ``where`` its DocumentError must name)
DOC_TEXT_FIELDS = [
    (("run_id",), "run_id"),
    (("state_digest",), "state_digest"),
    (("transcript_digest",), "transcript_digest"),
    (("tokens", 0, "kind"), "tokens[0].kind"),
    (("observations", 0, "source"), "observations[0].source"),
    (("observations", 0, "payload_digest"), "observations[0].payload_digest"),
    (("effects", 0, "target"), "effects[0].target"),
    (("effects", 0, "payload_digest"), "effects[0].payload_digest"),
    (("provenance_tags", 0), "provenance_tags[0]"),
]


class TestLoneSurrogates:
    @pytest.mark.parametrize(("path", "where"), DOC_TEXT_FIELDS, ids=str)
    def test_a_document_text_field_with_a_lone_surrogate_is_a_document_error(
        self, path: tuple[Any, ...], where: str
    ) -> None:
        """JSON can spell "\\ud800"; every string field refuses it naming the field."""
        doc = json.loads(json.dumps(DOC))
        node = doc
        for key in path[:-1]:
            node = node[key]
        node[path[-1]] = SURROGATE
        raw = json.dumps(doc).encode()  # ASCII JSON with a \ud800 escape
        with pytest.raises(cpstore.DocumentError) as info:
            cpstore.load_document(raw)
        assert info.value.where == where

    @pytest.mark.parametrize(
        ("where", "fields"),
        [
            ("run_id", {"run_id": SURROGATE}),
            ("state_digest", {"state_digest": SURROGATE}),
            ("observations[0].source", {"observations": (Observation(0, SURROGATE, "p", 1.0),)}),
            (
                "observations[0].payload_digest",
                {"observations": (Observation(0, "s", SURROGATE, 1.0),)},
            ),
            ("effects[0].target", {"effects": (Effect(0, SURROGATE, "d"),)}),
            ("effects[0].payload_digest", {"effects": (Effect(0, "t", SURROGATE),)}),
            ("provenance_tags[0]", {"provenance_tags": (SURROGATE,)}),
        ],
        ids=lambda v: v if isinstance(v, str) else "",
    )
    def test_a_run_built_in_code_with_a_lone_surrogate_is_refused_naming_it(
        self, where: str, fields: dict[str, Any]
    ) -> None:
        """Run(...) checks the same text fields a document does, with the same where."""
        args = {"run_id": "r", "state_digest": "s", **fields}
        with pytest.raises(cpstore.DocumentError) as info:
            cpstore.Run(args.pop("run_id"), 0, args.pop("state_digest"), **args)
        assert info.value.where == where

    @pytest.mark.parametrize(
        ("field", "call"),
        [
            ("kind", lambda st, rec: rec.token(SURROGATE, 1)),
            ("kind", lambda st, rec: rec.tokens([("rng", 1), (SURROGATE, 2)])),
            ("source", lambda st, rec: rec.observe(1, SURROGATE, b"x", pinned_at=1.0)),
            ("effect target", lambda st, rec: rec.effect(SURROGATE, b"x")),
            ("tags", lambda st, rec: rec.checkpoint(1, {"a": 1}, tags=[SURROGATE])),
            ("metadata", lambda st, rec: rec.checkpoint(1, {"a": 1}, metadata={SURROGATE: 1})),
            ("state part name", lambda st, rec: rec.checkpoint(1, {SURROGATE: 1})),
            ("run_id", lambda st, rec: st.recorder(SURROGATE)),
            ("branch", lambda st, rec: st.recorder("run", branch=SURROGATE)),
            ("run_id", lambda st, rec: st.latest(SURROGATE)),
            ("branch", lambda st, rec: st.history("run", SURROGATE)),
        ],
        ids=lambda v: v if isinstance(v, str) else "",
    )
    def test_an_api_text_field_with_a_lone_surrogate_is_refused_naming_it(
        self, tmp_path: Path, field: str, call: Any
    ) -> None:
        """InvalidInputError at the call naming the field; the recorder still checkpoints."""
        with cpstore.open(tmp_path / "s") as st:
            rec = st.recorder("run")
            with pytest.raises(cpstore.InvalidInputError) as info:
                call(st, rec)
            assert (info.value.where or "").startswith(field), info.value
            assert "surrogate" in str(info.value)
            rec.checkpoint(1, {"a": 1})  # nothing half-recorded poisons the next checkpoint
            assert st.verify().ok


def test_a_replay_cursor_asked_for_a_surrogate_kind_says_so(tmp_path: Path) -> None:
    """ReplayCursor.resolve of a lone surrogate ("\\ud800") is InvalidInputError about it,
    not a hash clash."""
    with cpstore.open(tmp_path / "s") as st:
        rec = st.recorder("run")
        rec.token("rng", 1)
        cid = rec.checkpoint(1, {"a": 1})
        with st.read(cid) as cp:
            cursor = cpstore.replay.ReplayCursor.from_checkpoint(cp)
            with pytest.raises(cpstore.InvalidInputError) as info:
                cursor.resolve(SURROGATE)
            assert "surrogate" in str(info.value)
            assert cursor.resolve("rng") == 1  # the refused call consumed nothing


def test_an_audit_start_past_uint64_is_invalid_input(tmp_path: Path) -> None:
    """audit_records(start=2**64) is InvalidInputError, not struct.error from the key."""
    with cpstore.open(tmp_path / "s") as st:
        st.append_audit("note", {})
        for start in (2**64, 2**200, -1, True):
            with pytest.raises(cpstore.InvalidInputError):
                list(st.audit_records(start=start))
        assert list(st.audit_records(start=2**64 - 1)) == []


def test_a_ref_key_damaged_into_non_utf8_is_an_integrity_error_not_a_traceback(
    tmp_path: Path,
) -> None:
    """A flipped ref key no name encodes to: log and gc exit 5 with one line (was a traceback)."""
    path = str(tmp_path / "s")
    with cpstore.open(path) as st:
        cid = st.recorder("run").checkpoint(1, {"a": 1})
        with st.backend.env.env.begin(write=True) as txn:
            txn.put(b"\xff\x00main", bytes.fromhex(cid), db=st.backend.db("refs"))
    for argv in (["log", "--store", path], ["gc", "--store", path, "--keep-last", "1"]):
        code, err = _cli(argv)
        # Named by its bytes (no name encodes to them: review101's refs._where).
        assert code == 5 and "refs/ff006d61696e" in err and len(err.strip().splitlines()) == 1, err
    with cpstore.open(path) as st:
        assert st.ref("run") == cid  # gc refused before it removed anything


def test_gc_delete_run_of_an_empty_name_names_the_run_id(hostile: dict[str, str]) -> None:
    """--delete-run '' is refused as a bad run id, not taken for a missing --keep-last."""
    code, err = _cli(["gc", "--delete-run", "", "--store", hostile["STORE"]])
    assert code == 3 and "run_id" in err and len(err.strip().splitlines()) == 1, err


def test_opening_a_file_as_a_store_is_bad_input_naming_the_path(tmp_path: Path) -> None:
    """cpstore.open() of a regular file, a path through one, or a NUL: InvalidInputError."""
    file = tmp_path / "f"
    file.write_bytes(b"not a store")
    for path in (file, file / "sub", "a\x00b"):
        with pytest.raises(cpstore.InvalidInputError):
            cpstore.open(path)
    assert file.read_bytes() == b"not a store"


@pytest.fixture(scope="module")
def hostile(tmp_path_factory: pytest.TempPathFactory) -> dict[str, str]:
    """A store with one checkpoint and the hostile paths the CLI is fed."""
    d = tmp_path_factory.mktemp("hostile")
    store = str(d / "store")
    with cpstore.open(store) as st:
        rec = st.recorder("run")
        rec.token("rng", 1)
        cid = rec.checkpoint(1, {"a": 1})
    (d / "file").write_text("{}")
    surrogate_kind = {**DOC, "tokens": [{**DOC["tokens"][0], "kind": SURROGATE}]}
    (d / "kind.json").write_text(json.dumps(surrogate_kind))  # ASCII JSON, "\ud800" escape
    (d / "folder").mkdir()
    os.mkfifo(d / "fifo")
    badbytes = bytes(d / "st") + b"\xff"  # a folder whose name is not UTF-8
    os.mkdir(badbytes)
    return {
        "STORE": store,
        "CID": cid,
        "FILE": str(d / "file"),
        "SURROGATE_KIND": str(d / "kind.json"),
        "FOLDER": str(d / "folder"),
        "FIFO": str(d / "fifo"),
        "UNDER_FILE": str(d / "file" / "x"),
        "MISSING": str(d / "missing"),
        "BADBYTES": os.fsdecode(badbytes),
    }


def _expand(argv: list[str], names: dict[str, str]) -> list[str]:
    return [names.get(a, a) for a in argv]


HUGE = str(2**64)
#: Integer options fed huge, negative, NaN, empty and non-ASCII values: usage errors.
INT_OPTIONS = [
    ["audit", "--store", "STORE", "--start"],
    ["audit", "--store", "STORE", "--limit"],
    ["log", "--store", "STORE", "--limit"],
    ["inspect", "CID", "--store", "STORE", "--tokens"],
    ["gc", "--store", "STORE", "--keep-last"],
    ["demo", "--steps"],
    ["demo", "--every"],
    ["demo", "--tokens"],
]
BAD_INTS = [HUGE, str(2**63), "-1", "-" + HUGE, "NaN", "inf", "", "1e3", "\x00", "9" * 5000]

#: (argv, exit code): hostile strings and paths where the CLI takes them.
CLI_CASES: list[tuple[list[str], int]] = [
    (["validate", "SURROGATE_KIND", "SURROGATE_KIND"], 3),
    (["diff", "SURROGATE_KIND", "SURROGATE_KIND"], 3),
    (["validate", "FIFO", "FILE"], 3),
    (["validate", "FILE", "FIFO"], 3),
    (["diff", "FIFO", "FIFO"], 3),
    (["validate", "FOLDER", "FILE"], 3),
    (["validate", "/dev/zero", "FILE"], 3),
    (["validate", "MISSING", "FILE"], 4),
    (["validate", "", "FILE"], 3),
    (["validate", "\x00", "FILE"], 3),
    (["validate", "CID", "CID", "--store", "FILE"], 3),
    (["validate", "CID", "CID", "--store", "FIFO"], 3),
    (["validate", "CID", "CID", "--store", "/dev/zero"], 3),
    (["validate", "CID", "CID", "--store", "UNDER_FILE"], 4),
    (["validate", "CID", "CID", "--store", "MISSING"], 4),
    (["validate", "CID", "FIFO", "--store", "STORE", "--no-record"], 3),
    (["validate", "CID", "\ud800", "--store", "STORE", "--no-record"], 3),
    (["demo", "--path", "FILE"], 3),
    (["demo", "--path", "FIFO"], 3),
    (["demo", "--path", "BADBYTES"], 3),
    (["log", "\udcff", "--store", "STORE"], 3),
    (["log", "run", "--branch", "\udcff", "--store", "STORE"], 3),
    (["log", "", "--store", "STORE"], 3),
    (["log", "\x00", "--store", "STORE"], 3),
    (["inspect", "\ud800", "--store", "STORE"], 3),
    (["inspect", "CID", "--part", "\ud800", "--store", "STORE"], 4),
    (["gc", "--delete-run", "\udcff", "--store", "STORE"], 3),
    (["gc", "--keep-last", "1", "--run", "\udcff", "--store", "STORE"], 3),
    # not hex: bad input (exit 3), as an inspect prefix
    (["sign-off", "\ud800", "--operator", "o", "--reason", "r", "--store", "STORE"], 3),
    (["audit", "--kind", "\udcff", "--store", "STORE"], 2),  # not a kind cpstore writes
    (["verify", "--store", "MISSING\nsecond line"], 4),  # a newline cannot split the line
    (["validate", "MISSING\rx\ny", "FILE"], 4),
    (["log", "run\nx", "--store", "STORE"], 4),
] + [
    ([*command, "--store", path], code)
    for command in (
        ["verify"],
        ["stats"],
        ["log"],
        ["audit"],
        ["inspect", "CID"],
        ["gc", "--keep-last", "1"],
        ["sign-off", "0" * 32, "--operator", "o", "--reason", "r"],
    )
    for path, code in (
        ("FILE", 3),
        ("FIFO", 3),
        ("/dev/zero", 3),
        ("UNDER_FILE", 4),
        ("MISSING", 4),
        ("", 3),
        ("\x00", 4),
        ("BADBYTES", 3),
    )
]

#: Child that runs one argv through cli.main and reports (code, stderr).
CLI_CHILD = r"""
import contextlib, io, json, sys
from cpstore import cli
err = io.StringIO()
with contextlib.redirect_stderr(err), contextlib.redirect_stdout(io.StringIO()):
    try:
        code = cli.main(json.loads(sys.argv[1]))
    except SystemExit as exc:
        code = exc.code
print(json.dumps([code, err.getvalue()]))
"""


class TestCliHostileValues:
    @pytest.mark.parametrize("value", BAD_INTS, ids=repr)
    @pytest.mark.parametrize("command", INT_OPTIONS, ids=" ".join)
    def test_an_out_of_range_integer_option_is_a_usage_error(
        self, hostile: dict[str, str], command: list[str], value: str
    ) -> None:
        """Huge, negative, NaN, empty or NUL integers: exit 2, never struct.error or a run."""
        code, err = _cli(_expand([*command, value], hostile))
        assert code == 2, (code, err)
        assert "Traceback" not in err and "error:" in err.strip().splitlines()[-1]

    @pytest.mark.parametrize(("argv", "expected"), CLI_CASES, ids=lambda v: repr(v)[:60])
    def test_a_hostile_path_or_string_is_one_line_and_its_code(
        self, hostile: dict[str, str], argv: list[str], expected: int
    ) -> None:
        """FIFOs, folders, devices, files as stores, NULs, surrogates: one line, no hang."""
        args = _expand(argv, hostile)
        if any(a == hostile["FIFO"] for a in args):
            # A reader blocked on a FIFO would hang this test: run it in a child, bounded.
            out = subprocess.run(
                [sys.executable, "-c", CLI_CHILD, json.dumps(args)],
                capture_output=True,
                text=True,
                timeout=60,
                check=False,
            )
            assert out.returncode == 0, out.stderr[-2000:]
            code, err = json.loads(out.stdout)
        else:
            code, err = _cli(args)
        assert "Traceback" not in err
        assert code == expected, (code, err)
        if code != 0:
            assert len(err.strip().splitlines()) == 1, err
