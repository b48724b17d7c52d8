"""review83: digits read from text are ASCII digits, and never too many for ``int``.

``str.isdigit`` takes superscripts (``"²"``), which ``int`` refuses, and ``int`` refuses
more than 4,300 digits (Python's ``sys.get_int_max_str_digits``); both were a bare
ValueError: ``Store.resolve("RUN@BRANCH~" + 5,000 digits)``, a PostgreSQL URL's
``pool_max=²`` (or 5,000 digits), and a counts table whose comment was changed to
``cpstore counts ²``. Other scripts' digits (``٣``), which ``int`` reads, were taken as
a ``pool_max``. Now: N past 2**63 reaches past any history ("no ancestor"), a bad
``pool_max`` is InvalidInputError, a comment that is not ours counts as version 0.
Also pinned: how ``resolve`` reads ids, prefixes and odd ``~N`` (unchanged).
"""

from __future__ import annotations

import pytest
from pg_cluster import backend_store  # noqa: F401 - the ``store`` fixture

from cpstore.errors import InvalidInputError, NotFoundError, StoreConnectionError
from cpstore.store.facade import Store
from cpstore.store.facade import open as open_store
from cpstore.store.pg_count import counts_version


def _two(store: Store) -> tuple[str, str]:
    rec = store.recorder("r")
    first = rec.checkpoint(0, b"a")
    second = rec.checkpoint(1, b"b")
    rec.close()
    return first, second


@pytest.mark.parametrize("n", ["1" * 5000, "9" * 20, "1" + "0" * 19, "0" * 4999 + "2"])
def test_an_n_past_the_history_is_no_ancestor(store: Store, n: str) -> None:
    _two(store)
    with pytest.raises(NotFoundError) as err:
        store.resolve(f"r@main~{n}")
    assert "no ancestor" in err.value.what


def test_leading_zeros_are_the_same_n(store: Store) -> None:
    first, second = _two(store)
    assert store.resolve("r@main~" + "0" * 5000) == second
    assert store.resolve("r@main~" + "0" * 5000 + "1") == first
    assert store.resolve("r@~01") == first


@pytest.mark.parametrize(
    "n", ["\u00b2", "\u0661", "\uff10", "-1", "+1", " 1", "1 ", "0x1", "1.0", ""]
)
def test_an_n_not_of_ascii_digits_is_refused(store: Store, n: str) -> None:
    _two(store)
    with pytest.raises(InvalidInputError):
        store.resolve(f"r@main~{n}")


@pytest.mark.parametrize(
    "spec",
    [
        "",
        "0x{id}",
        "{id}0",
        "{id1}",
        "{id7}",
        "\u0660" * 8,  # Arabic-Indic zeros: digits to int(), not hex
        "\uff10" * 8,  # fullwidth zeros
        "{id8}\u200b",
    ],
)
def test_what_is_not_hex_is_not_read_as_an_id(store: Store, spec: str) -> None:
    first, _ = _two(store)
    text = spec.format(id=first, id1=first[:1], id7=first[:7], id8=first[:8])
    with pytest.raises(InvalidInputError):
        store.resolve(text)


def test_an_id_or_prefix_in_either_case_and_padded(store: Store) -> None:
    first, _ = _two(store)
    for text in (first.upper(), f" {first}\u3000", first[:31], first[:8].upper()):
        assert store.resolve(text) == first


@pytest.mark.parametrize("pool_max", ["%C2%B2", "%D9%A3", "1" * 5000, "0" * 5000 + "1001", "0"])
def test_a_pool_max_not_of_a_few_ascii_digits_is_bad_input(pool_max: str) -> None:
    with pytest.raises(InvalidInputError) as err:
        open_store(f"postgresql://127.0.0.1:1/x?pool_max={pool_max}")
    assert "pool_max" in err.value.what


@pytest.mark.parametrize("tail", ["\u00b2", "\u0661", "1" * 5000, "", "1 ", "x"])
def test_a_counts_comment_not_ours_is_version_0(tail: str) -> None:
    assert counts_version("cpstore counts " + tail) == 0


def test_a_counts_comment_of_ours_is_its_version() -> None:
    assert counts_version("cpstore counts 3") == 3
    assert counts_version(None) == 0


def test_a_pool_max_with_leading_zeros_is_its_number() -> None:
    """Read past the URL check (here the connection to port 1 is what fails)."""
    with pytest.raises(StoreConnectionError):
        open_store("postgresql://127.0.0.1:1/x?pool_max=" + "0" * 5000 + "8")


class _Other(str):
    """A name whose own methods speak of another checkpoint."""

    other = ""

    def strip(self, chars: str | None = None) -> str:
        return self.other

    def lower(self) -> str:
        return self.other

    def __contains__(self, item: object) -> bool:
        return False


def test_a_str_subclass_is_read_by_its_characters(store: Store) -> None:
    first, second = _two(store)
    _Other.other = second
    for text in (first, first[:8], "r@main~1"):
        assert store.resolve(_Other(text)) == first  # was the second
