"""The per-call context handed to advice, and the event object handed to subscribers."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from ._joinpoint import JoinPoint

__all__ = ["CallContext", "Event"]


class CallContext:
    """What advice sees of one call of a join point.

    Built once per call, so it is kept cheap: ``__slots__``, no dict until ``data`` is first
    read, and the positional arguments stay the caller's tuple until advice reads
    ``args`` (then they become a list that advice may edit in place).
    """

    __slots__ = (
        "_args",
        "_data",
        "_recovered",
        "_skipped",
        "exception",
        "instance",
        "joinpoint",
        "kwargs",
        "result",
        "target",
    )

    joinpoint: JoinPoint
    target: Any
    instance: Any
    kwargs: dict[str, Any]
    result: Any
    exception: BaseException | None

    def __init__(
        self,
        joinpoint: JoinPoint,
        target: Any,
        instance: Any,
        args: tuple[Any, ...],
        kwargs: dict[str, Any],
    ) -> None:
        self.joinpoint = joinpoint
        self.target = target
        self.instance = instance
        self._args: tuple[Any, ...] | list[Any] = args
        self.kwargs = kwargs
        self.result = None
        self.exception = None
        self._data: dict[str, Any] | None = None
        self._skipped = False
        self._recovered = False

    @property
    def args(self) -> list[Any]:
        """Positional arguments of the call; edit in place or assign to change them."""
        args = self._args
        if type(args) is not list:
            args = self._args = list(args)
        return args

    @args.setter
    def args(self, value: Any) -> None:
        self._args = list(value)

    @property
    def data(self) -> dict[str, Any]:
        """A dict shared by all advice of this one call (e.g. a timer's start time)."""
        data = self._data
        if data is None:
            data = self._data = {}
        return data

    @property
    def runner(self) -> Any:
        """The runner of a runner join point (the bound instance), else ``None``."""
        instance = self.instance
        return instance if getattr(instance, "__aspecthook_runner__", False) else None

    @property
    def skipped(self) -> bool:
        """Whether before advice called :meth:`skip`."""
        return self._skipped

    @property
    def recovered(self) -> bool:
        """Whether error advice called :meth:`recover`."""
        return self._recovered

    def skip(self, value: Any = None) -> None:
        """From before advice: do not run the target; ``value`` becomes the result."""
        self._skipped = True
        self.result = value

    def recover(self, value: Any = None) -> None:
        """From error advice: suppress the exception; ``value`` becomes the result."""
        self._recovered = True
        self.result = value

    def __repr__(self) -> str:
        return (
            f"<CallContext {self.joinpoint.name} args={tuple(self._args)!r} kwargs={self.kwargs!r}>"
        )


class Event:
    """An emitted event: its ``name``, the ``payload`` keyword arguments and the ``source``."""

    __slots__ = ("name", "payload", "source")

    def __init__(self, name: str, payload: dict[str, Any], source: Any = None) -> None:
        self.name = name
        self.payload = payload
        self.source = source

    @property
    def names(self) -> frozenset[str]:
        """The names a pointcut matches against: just ``name``."""
        return frozenset((self.name,))

    def __getattr__(self, key: str) -> Any:
        try:
            return self.payload[key]
        except KeyError:
            raise AttributeError(
                f"event {self.name!r} has no payload key {key!r}; it has {sorted(self.payload)}"
            ) from None

    def __repr__(self) -> str:
        return f"Event({self.name!r}, payload={self.payload!r}, source={self.source!r})"
