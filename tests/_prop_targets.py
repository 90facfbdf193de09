"""Targets of the stateful weaving properties: one of each kind of callable weave() takes.

Each target appends ``"target"`` to ``LOG`` when its body runs and raises ``ValueError``
for a negative argument, so a test can tell what ran and in which order.
"""

from __future__ import annotations

from collections.abc import Iterator

import aspecthook as ah

LOG: list[object] = []


def _body(x: int) -> None:
    LOG.append("target")
    if x < 0:
        raise ValueError(f"bad {x}")


def plain(x: int) -> int:
    _body(x)
    return x + 1


class Base:
    def m(self, x: int) -> int:
        _body(x)
        return x + 10

    @classmethod
    def cm(cls, x: int) -> tuple[str, int]:
        _body(x)
        return (cls.__name__, x)

    @staticmethod
    def sm(x: int) -> int:
        _body(x)
        return -x


class Sub(Base):
    def m(self, x: int) -> int:  # its own, not calling super(): one join point per call
        _body(x)
        return x + 20


class Solo:
    def m(self, x: int) -> int:
        _body(x)
        return x + 30


SOLO = Solo()


async def coro(x: int) -> int:
    _body(x)
    return x + 40


def gen(x: int) -> Iterator[int]:
    # The body runs when the generator is iterated, after the woven call has returned.
    if x < 0:
        raise ValueError(f"bad {x}")
    yield x
    yield x + 1


@ah.joinpoint("props.declared")
def declared(x: int) -> int:
    _body(x)
    return x + 50


def _snapshot() -> dict[str, object]:
    """What weaving may replace, as it is now (private: a weave of the module skips it)."""
    return {
        "plain": globals()["plain"],
        "coro": globals()["coro"],
        "gen": globals()["gen"],
        "declared": globals()["declared"],
        "Base.m": vars(Base)["m"],
        "Base.cm": vars(Base)["cm"],
        "Base.sm": vars(Base)["sm"],
        "Sub.m": vars(Sub)["m"],
        "Solo.m": vars(Solo)["m"],
        "Sub.__dict__": sorted(vars(Sub)),
        "Base.__dict__": sorted(vars(Base)),
        "SOLO.__dict__": sorted(vars(SOLO)),
    }


ORIGINALS = _snapshot()
