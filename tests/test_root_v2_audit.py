"""Adversarial checks of root v2 (store layout 4): upgrades, backends, transfer, verify=False."""

from __future__ import annotations

import random
from pathlib import Path
from typing import Any

import psycopg
import pytest
from pg_cluster import Cluster, pg_cluster, pg_url  # noqa: F401 - fixtures

import cpstore
from cpstore.native.canonical import encode_value
from cpstore.store.facade import Store
from cpstore.store.model import STORE_VERSION
from cpstore.store.pg_open import parse_url

WORDS = ("the", "planner", "asked", "search", "tool", "for", "weather", "and", "then", "a")


def _history(n: int) -> list[dict[str, str]]:
    def text(seed: int) -> str:
        rng = random.Random(seed)
        return " ".join(rng.choice(WORDS) for _ in range(180))[:900]

    return [{"role": "user", "content": f"{i}: " + text(i)} for i in range(n)]


def _sql(url: str, statement: str, params: tuple[Any, ...] = ()) -> list[Any]:
    with psycopg.connect(parse_url(url).conninfo, autocommit=True) as conn:
        cur = conn.execute(statement, params)
        return cur.fetchall() if cur.description is not None else []


def _set_pg_version(url: str, version: int) -> None:
    fmt = {"layout": "cpstore", "version": version, "digest": "xxh3-128"}
    schema = parse_url(url).schema
    _sql(url, f'UPDATE "{schema}"."meta" SET v = %s WHERE k = %s', (encode_value(fmt), b"format"))


def _record(store: Store, run: str, steps: int) -> list[str]:
    rec = store.recorder(run)
    return [rec.checkpoint(i, {"h": _history(60 + i)}) for i in range(steps)]


class TestPostgresUpgrade:
    def test_upgrading_a_layout_3_postgres_store_keeps_its_refs_digest(self, pg_url: str) -> None:
        """A layout-3 PostgreSQL store opened writable upgrades to 4 and still verifies ok."""
        with cpstore.open(pg_url) as st:
            _record(st, "a", 3)
            _record(st, "b", 2)
            assert st.verify().ok
        _set_pg_version(pg_url, 3)
        with cpstore.open(pg_url) as st:
            assert st.backend.layout == STORE_VERSION
            report = st.verify()
            assert report.ok, report.problems
            st.recorder("a", parent=None).checkpoint(9, {"h": _history(70)})
            assert st.verify().ok
