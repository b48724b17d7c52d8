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
import subprocess
import sys

import lmdb
import msgpack
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import cpstore
from cpstore import cli
from cpstore._document import _TOP_OPTIONAL, _TOP_REQUIRED
from cpstore._errors import CpstoreError
from cpstore._records import RecordType

DOCUMENTED_EXITS = {0, 2, 3, 4, 5, 6, 10, 11}
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
    def test_garbage_mappings_raise_only_cpstore_errors(self, doc: dict) -> None:
        """parse_document, and load_document of its JSON and msgpack forms, fail only cleanly."""
        for attempt in (
            lambda: cpstore.parse_document(doc),
            lambda: cpstore.load_document(json.dumps(doc).encode()),
            lambda: cpstore.load_document(msgpack.packb(doc)),
        ):
            with contextlib.suppress(CpstoreError, ValueError, OverflowError):
                attempt()

    def test_a_billion_declared_tokens_are_not_allocated(self) -> None:
        """A 30-byte msgpack doc declaring 10^9 tokens peaks under 20 MiB RSS growth."""
        code = r"""
import resource, msgpack, cpstore
from cpstore._errors import CpstoreError
head = msgpack.packb({"format": 1, "run_id": "r", "step": 0, "state_digest": "s",
                      "observations": [], "call_graph": [], "transcript_digest": None,
                      "effects": []})
doc = bytes([head[0] + 1]) + head[1:] + msgpack.packb("tokens") + b"\xdd" + (10**9).to_bytes(4, "big")
before = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
try:
    cpstore.load_document(doc)
except CpstoreError:
    pass
print(resource.getrusage(resource.RUSAGE_SELF).ru_maxrss - before)
"""
        out = subprocess.run(
            [sys.executable, "-c", code], capture_output=True, text=True, timeout=60
        )
        assert out.returncode == 0, out.stderr
        assert int(out.stdout) < 20 * 1024, out.stdout  # KiB


class TestCanonicalAndPackedLogs:
    @FAST
    @given(st.binary(max_size=200))
    def test_decode_value_on_garbage(self, data: bytes) -> None:
        """decode_value accepts only canonical bytes and fails with CanonicalEncodingError."""
        try:
            value = cpstore.decode_value(data)
        except cpstore.CanonicalEncodingError:
            return
        assert cpstore.encode_value(value) == data

    @FAST
    @given(st.binary(max_size=400), st.binary(max_size=400))
    def test_packed_logs_with_garbage(self, a: bytes, b: bytes) -> None:
        """first_divergence and scan_tokens: a result or RecordFormatError, never a crash."""
        for rt in RecordType:
            with contextlib.suppress(cpstore.RecordFormatError):
                cpstore.first_divergence(rt, a, b)
        with contextlib.suppress(cpstore.RecordFormatError):
            cpstore.scan_tokens(a)


STORE_PROBE = r"""
import sys, json, traceback
import cpstore
from cpstore._errors import CpstoreError
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
        st.one_of(st.binary(max_size=80), json_values.map(cpstore.encode_value)),
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
            with s._e.env.begin() as txn:
                okey = bytes(next(iter(txn.cursor(db=s._db("objects"))))[0])
        key = {"checkpoints": bytes.fromhex(cid), "objects": okey, "audit": bytes(8)}[db]
        value = (b"\0" * 8 + garbage) if db == "checkpoints" else garbage
        env = lmdb.open(str(path), max_dbs=16)
        # open_db before the write txn: inside it, open_db starts a second write
        # txn on this thread and waits on LMDB's writer lock forever.
        handle = env.open_db(db.encode())
        with env.begin(write=True) as txn:
            txn.put(key, value, db=handle)
        env.close()
        out = subprocess.run(
            [sys.executable, "-c", STORE_PROBE, str(path), cid],
            capture_output=True,
            text=True,
            timeout=60,
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
