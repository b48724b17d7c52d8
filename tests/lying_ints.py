"""Int subclasses whose own comparisons lie, shared by the tests that check a step, a seq
or a canonical int is judged by its value (review81, review83)."""

from __future__ import annotations


class Agrees(int):
    """An int whose comparisons say every bound holds."""

    def __ge__(self, other: object) -> bool:
        return True

    def __le__(self, other: object) -> bool:
        return True

    def __lt__(self, other: object) -> bool:
        return True

    def __gt__(self, other: object) -> bool:
        return False

    __hash__ = int.__hash__


class Denies(int):
    """An int whose comparisons say no bound holds."""

    def __ge__(self, other: object) -> bool:
        return False

    def __le__(self, other: object) -> bool:
        return False

    def __lt__(self, other: object) -> bool:
        return False

    def __gt__(self, other: object) -> bool:
        return False

    __hash__ = int.__hash__
