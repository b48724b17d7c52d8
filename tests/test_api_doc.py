"""docs/api.md documents every public name, so a runtime author never needs dir()."""

from __future__ import annotations

import re
from pathlib import Path

import cpstore

API = Path(__file__).resolve().parent.parent / "docs" / "api.md"


def test_every_public_name_has_a_section_in_docs_api_md() -> None:
    """Each name of cpstore.__all__ has its own `### cpstore.NAME` heading."""
    headings = set(re.findall(r"^### `cpstore\.(\w+)`", API.read_text(), re.M))
    assert len(cpstore.__all__) >= 45
    assert sorted(set(cpstore.__all__) - headings) == []


def test_the_names_new_users_could_only_find_with_dir_are_documented() -> None:
    """cp.id, cp.manifest, ReplaySession(mode=), rec.transcript, audit_records, Run, Observation."""
    text = API.read_text()
    for needle in (
        "- `.id` (property)",
        "- `.manifest` (property)",
        "ReplaySession(cp: ",
        "mode: ReplayMode",
        "- `.transcript(data: bytes) -> None`",
        "- `.audit_records(*, kind: str | None = None",
        "`Run(run_id: str, step: int, state_digest: str, *,",
        "`Observation(step: int, source: str, payload_digest: str, pinned_at: float | None)",
    ):
        assert needle in text, needle


def test_every_public_method_of_the_returned_objects_is_documented() -> None:
    """Each public method of Store, Recorder, CheckpointView and ReplaySession has a line,
    also those they inherit from cpstore's own bases (Store's StoreUpkeep, Recorder's
    RecorderEnds and BulkAppends: its batch appends were missing from docs/api.md)."""
    text = API.read_text()
    for cls in (cpstore.Store, cpstore.Recorder, cpstore.CheckpointView, cpstore.ReplaySession):
        own = [vars(base) for base in cls.__mro__ if base.__module__.startswith("cpstore.")]
        for name, value in [item for members in own for item in members.items()]:
            if not name.startswith("_") and callable(value):
                assert re.search(rf"^- `\.{name}\(", text, re.M), f"{cls.__name__}.{name}"
