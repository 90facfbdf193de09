"""Calls the public API the way users do; checked by ``mypy --strict`` (``make typecheck``).

Not collected by pytest (no ``test_`` prefix): its job is to fail type checking when the
public signatures regress.
"""

from __future__ import annotations

import aspecthook as ah


@ah.joinpoint
def plain(x: int) -> int:
    return x + 1


@ah.joinpoint("typing.named")
def named(x: int, *, y: str = "") -> str:
    return f"{x}{y}"


class Model:
    @ah.joinpoint
    def forward(self, x: int) -> int:
        return x * 2


class Timing(ah.Aspect):
    priority = ah.Priority.HIGH

    @ah.around()
    def time_it(self, ctx: ah.CallContext, proceed: ah.Proceed) -> object:
        return proceed()

    def after_train_iter(self, ctx: ah.CallContext) -> None:
        ctx.data["seen"] = True


def use() -> None:
    result: int = plain(1)
    text: str = named(1, y="a")
    doubled: int = Model().forward(3)
    handle: ah.Handle = ah.register(Timing(pointcut="typing.*"))
    with ah.woven("json.dumps", Timing()):
        pass
    advice = ah.before("typing.named", priority="HIGH", every=2)(lambda ctx: None)
    advice.remove()
    event: ah.Event = ah.emit("typing.event", value=1)
    rows: ah.Description = ah.describe("typing.*")
    first: ah.Row | None = rows[0] if rows else None
    handle.remove()
    del result, text, doubled, event, first
