"""review77: with two refs vanished, the right put-back is never refused.

``_check_one_of_two`` accepted a put-back when ``search`` found the other vanished ref
(capped at ``NAME_TRIES`` hashes), and refused it when ``pair_search`` (capped at
``PAIR_TRIES`` hashes, over the absent names only) found the pair, without asking whether
the put-back is one of the pair. On a run with many refs (every present branch name is
tried per checkpoint by ``search``, only the absent ones by ``pair_search``) the first
gives up where the second still finds the two: the RIGHT put-back was then refused,
naming itself as one of the two that vanished. Shown here with ``NAME_TRIES`` at 0 (the
cap reached); the store-size version is the second test. Both engines."""

from __future__ import annotations

import pytest
from pg_cluster import backend_url  # noqa: F401 - fixture
from test_audit63_retention_digest import _raw_ref

import cpstore
from cpstore.errors import IntegrityError, PutBackMismatchError
from cpstore.store import ref_forgotten
from cpstore.store.model import ref_key


def _two_forks_vanished(url: str) -> tuple[str, str]:
    """Run r: main with three checkpoints, forks a and b at main's head (never recorded
    on, so their heads are reached by main: tried last); a and b deleted behind cpstore's
    back. A third fork c records, so a's and b's names... are given by the refs only: c's
    name and main's. a and b are named through their own checkpoints below."""
    with cpstore.open(url) as st:
        rec = st.recorder("r")
        ids = [rec.checkpoint(i, {"i": i}) for i in range(3)]
        st.fork("r", "a", ids[1])
        a = st.recorder("r", branch="a").checkpoint(2, {"a": 1})
        st.fork("r", "b", ids[1])
        b = st.recorder("r", branch="b").checkpoint(2, {"b": 1})
        st.fork("r", "a2", a)  # a's and b's heads reached by other refs: tried last
        st.fork("r", "b2", b)
    _raw_ref(url, ref_key("r", "a"), None)
    _raw_ref(url, ref_key("r", "b"), None)
    return a, b


def test_the_right_put_back_is_accepted_when_search_gives_up(
    url: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    a, b = _two_forks_vanished(url)
    with cpstore.open(url) as st:
        assert sorted(d["branch"] for d in st.vanished_refs()) == ["a", "b"]
        monkeypatch.setattr(ref_forgotten, "NAME_TRIES", 0)
        st.repair_ref("r", "a", a, operator="ops", reason="put back")  # was refused
        monkeypatch.undo()
        with pytest.raises(PutBackMismatchError):
            st.repair_ref("r", "b", a, operator="ops", reason="wrong head")
        st.repair_ref("r", "b", b, operator="ops", reason="put back")
        assert st.branches("r")["a"] == a and st.branches("r")["b"] == b
        assert st.verify().ok


def test_a_wrong_put_back_is_still_refused_when_search_gives_up(
    url: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    a, b = _two_forks_vanished(url)
    with cpstore.open(url) as st:
        monkeypatch.setattr(ref_forgotten, "NAME_TRIES", 0)
        with pytest.raises(PutBackMismatchError) as info:
            st.repair_ref("r", "a", b, operator="ops", reason="wrong head")
        assert info.value.expected["head"] in (a, b)
        with pytest.raises(IntegrityError):
            st.recorder("r", branch="a").checkpoint(9, {"new": "root"})
