"""The per-call context handed to advice, and the event object handed to subscribers."""

from __future__ import annotations

from collections.abc import Callable
from contextvars import ContextVar
from typing import TYPE_CHECKING, Any

from .errors import UnsupportedAdviceError

if TYPE_CHECKING:
    from ._joinpoint import JoinPoint

__all__ = [
    "CURRENT_RUNNER",
    "CallContext",
    "Event",
    "Proceed",
    "RunnerOnRead",
    "is_runners_own",
    "runner_of",
    "skip_in_error_advice",
]

#: The runner whose ``run()`` is in progress in this context (thread / task), if any.
CURRENT_RUNNER: ContextVar[Any] = ContextVar("aspecthook_current_runner", default=None)

#: What around advice receives as ``proceed``: call it (optionally with new arguments)
#: to run the rest of the chain and the target; it returns the result.
Proceed = Callable[..., Any]


class CallContext:
    """What advice sees of one call of a join point.

    Built once per call, so it is kept cheap. The dispatcher fills the seven slots every
    call needs without running ``__init__`` (see ``_FastContext`` in ``_dispatch``);
    ``exception``, ``data`` and the recovered flag are slots left unset until used, read
    through properties with a default. Positional arguments stay the caller's tuple until
    advice reads ``args`` (then they become a list that advice may edit in place).
    """

    __slots__ = (
        "_args",
        "_arounds",
        "_data",
        "_exception",
        "_level",
        "_number",
        "_recovered",
        "_settle",
        "_skipped",
        "instance",
        "joinpoint",
        "kwargs",
        "result",
        "runner",
        "target",
    )

    joinpoint: JoinPoint
    target: Any
    instance: Any
    kwargs: dict[str, Any]
    result: Any
    _args: tuple[Any, ...] | list[Any]
    _skipped: bool
    _data: dict[str, Any]
    _exception: BaseException | None
    _recovered: bool
    #: What around advice left to do until error advice has decided how a failed call
    #: ends (``_dispatch.after_error_advice``); unset until then, so it costs no call.
    _settle: list[Callable[[bool], None]]
    _arounds: tuple[Callable[..., Any], ...]
    _level: int
    #: The call's number at a join point with a counter (see ``JoinPoint.counter``).
    _number: int
    #: The runner of this call: the bound runner of a runner join point, else the runner
    #: whose ``run()`` is in progress in this context (so advice on any of the user's own
    #: callables reaches it), else ``None`` (see ``runner_of``). A slot: the dispatchers
    #: of a runner's own join points fill it, so advice reads it without a call;
    #: elsewhere the context is a ``RunnerOnRead``, which works it out on first read.
    runner: Any
    #: Whether ``__init__`` works ``runner`` out (``RunnerOnRead`` leaves it to a read).
    _runner_on_init = True

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
        self._args = args
        self.kwargs = kwargs
        self.result = None
        self._skipped = False
        if self._runner_on_init:  # else worked out on first read (RunnerOnRead)
            self.runner = runner_of(instance)

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
        try:
            return self._data
        except AttributeError:
            data: dict[str, Any] = {}
            self._data = data
            return data

    @property
    def exception(self) -> BaseException | None:
        """The exception the target raised (set for error advice and after a recovery)."""
        try:
            return self._exception
        except AttributeError:
            return None

    @exception.setter
    def exception(self, value: BaseException | None) -> None:
        self._exception = value

    @property
    def skipped(self) -> bool:
        """Whether before advice called :meth:`skip`."""
        return self._skipped

    @property
    def recovered(self) -> bool:
        """Whether error advice called :meth:`recover`."""
        return getattr(self, "_recovered", False)

    def proceed(self, *args: Any, **kwargs: Any) -> Any:
        """Run the rest of the around chain and the target; what around advice calls.

        ``proceed(*args, **kwargs)`` with any argument replaces both the positional and the
        keyword arguments for this one nested call: the call's own arguments are back when
        it returns or raises, so a later ``proceed()`` (a retry, a fallback) gets them, not
        the replacement. At a synchronous join point around advice receives this bound
        method as ``proceed``: a bound method costs less to make per call than a closure,
        and the chain position lives on the context (restored on the way out, so an advice
        may proceed twice, as ``Retry`` does; to proceed after returning, see
        :meth:`deferred`). At an async join point each around advice receives a
        ``proceed`` of its own, and this raises ``UnsupportedAdviceError`` (see
        ``_dispatch._AsyncContext``).
        """
        if args or kwargs:
            saved = self._args, self.kwargs
            self._args = list(args)
            self.kwargs = kwargs
            try:
                return self.proceed()
            finally:
                self._args, self.kwargs = saved
        try:
            level = self._level
        except AttributeError:  # set only for around advice: this call has no chain to run
            raise _not_around(self.joinpoint.name) from None
        arounds = self._arounds
        if level < len(arounds):
            self._level = level + 1
            try:
                return arounds[level](self, self.proceed)
            finally:
                self._level = level
        kwargs = self.kwargs
        return self.target(*self._args, **kwargs) if kwargs else self.target(*self._args)

    def deferred(self, proceed: Proceed) -> Proceed:
        """``proceed`` as a callable that still works after this around advice has returned.

        For around advice that hands its work to a coroutine which calls ``proceed`` again
        once the advice has returned, as ``Retry`` does for an async function behind a plain
        decorator. At a synchronous join point the ``proceed`` an advice receives runs the
        rest of the chain from the place the context records *now*, and that place (with
        any arguments an outer ``proceed(*args)`` gave) is put back as soon as the advice
        returns; a later call would run the advice itself again. The callable returned
        runs the rest of the chain from this advice's place with the arguments it was
        called with, every time, and leaves the context as it found it. Get it while the
        advice runs. At an async join point ``proceed`` already works at any time and is
        returned as it is.
        """
        # Copies, taken now and again for each call: a call's in-place edits of ctx.args /
        # ctx.kwargs (by advice further in) do not reach the next call.
        level, args, kwargs = self._level, tuple(self._args), self.kwargs.copy()

        def proceed_later(*new_args: Any, **new_kwargs: Any) -> Any:
            saved = self._level, self._args, self.kwargs
            self._level, self._args, self.kwargs = level, list(args), kwargs.copy()
            try:
                return proceed(*new_args, **new_kwargs)
            finally:
                self._level, self._args, self.kwargs = saved

        return proceed_later

    def _branch(self, args: tuple[Any, ...], kwargs: dict[str, Any]) -> CallContext:
        """A copy of this context with ``args`` and ``kwargs`` as its arguments, sharing its
        ``data``: what the rest of an async around chain sees after ``proceed(*args,
        **kwargs)``, so that branches run concurrently (``asyncio.gather(proceed('a'),
        proceed('b'))``) each see their own arguments and the call's own stay as they are.
        """
        self.data  # made now, so that the copy shares it  # noqa: B018
        branch = object.__new__(type(self))
        for slot in _SLOTS:
            try:
                value = slot.__get__(self, CallContext)
            except AttributeError:  # a slot left unset until used: unset in the copy too
                continue
            slot.__set__(branch, value)
        branch._args = list(args)
        branch.kwargs = kwargs
        return branch

    def skip(self, value: Any = None) -> None:
        """From before advice: do not run the target; ``value`` becomes the result.

        From error advice it raises ``UnsupportedAdviceError`` (in place of the call's
        exception, chained to it): ``recover(value)`` is what makes a value the result
        there. From after advice, where the target has run, it only sets ``result`` (as
        assigning ``ctx.result`` does): telling that stage apart here would cost every
        skipped call a check, so it is not refused (``docs/known-issues.md``).
        """
        self._skipped = True
        self.result = value

    def recover(self, value: Any = None) -> None:
        """From error advice: suppress the exception; ``value`` becomes the result.

        Anywhere no exception is being handled (before, around or after advice of a call
        that did not fail) it raises ``UnsupportedAdviceError``: it used to do nothing
        there, or, from before advice, to suppress a later exception that no error advice
        recovered. In after advice of a call error advice recovered it sets ``result``.
        """
        if self.exception is None:  # set by the dispatcher before error advice runs
            raise _not_in_error_advice(self.joinpoint.name)
        self._recovered = True
        self.result = value

    def __repr__(self) -> str:
        return (
            f"<CallContext {self.joinpoint.name} args={tuple(self._args)!r} kwargs={self.kwargs!r}>"
        )


# The slot descriptors of ``CallContext`` (what ``_branch`` copies): read through them, an
# unset slot raises AttributeError without reaching ``RunnerOnRead.__getattr__``.
_SLOTS = tuple(CallContext.__dict__[name] for name in CallContext.__slots__)


def runner_of(instance: Any) -> Any:
    """``CallContext.runner`` for a call on ``instance``: it, if it is a runner, else the
    runner whose ``run()`` is in progress in this context, else None."""
    try:
        is_runner = bool(getattr(instance, "__aspecthook_runner__", False))
    except Exception:  # a proxy object whose __getattr__ raises: not a runner
        is_runner = False
    return instance if is_runner else CURRENT_RUNNER.get()


def is_runners_own(jp: Any) -> bool:
    """Whether ``jp`` is one of a runner's own join points (its target is a method bound to
    a runner, see ``Runner._declare_joinpoints``): every call of it has that runner as
    ``ctx.runner``, never ``None``."""
    try:
        owner = getattr(getattr(jp, "target", None), "__self__", None)
        return bool(getattr(owner, "__aspecthook_runner__", False))
    except Exception:  # a proxy object whose __getattr__ raises: not a runner
        return False


def _not_around(name: str) -> UnsupportedAdviceError:
    """The error for ``ctx.proceed()`` called where no around chain runs."""
    return UnsupportedAdviceError(
        f"ctx.proceed() was called at {name!r} outside around advice: only around advice "
        "runs the target, through proceed (`def advice(ctx, proceed): return proceed()`); "
        "before advice changes ctx.args / ctx.kwargs or calls ctx.skip(value), after "
        "advice reads ctx.result, error advice calls ctx.recover(value)",
        kind="proceed",
        target=name,
    )


def _not_in_error_advice(name: str) -> UnsupportedAdviceError:
    """The error for ``ctx.recover()`` called where no exception is being handled."""
    return UnsupportedAdviceError(
        f"ctx.recover() was called at {name!r} where no exception is being handled: only "
        "error advice (@on_error) recovers, from the exception in ctx.exception; before "
        "advice calls ctx.skip(value) to give a result without running the target, around "
        "advice that catches the exception proceed() raised returns the value instead, "
        "after advice assigns ctx.result",
        kind="recover",
        target=name,
    )


def skip_in_error_advice(name: str, exc: BaseException) -> UnsupportedAdviceError:
    """The error for ``ctx.skip()`` called by error advice (raised in place of ``exc``)."""
    error = UnsupportedAdviceError(
        f"ctx.skip() was called by error advice at {name!r}, where the target has already "
        f"raised {type(exc).__qualname__}: call ctx.recover(value) there to suppress the "
        "exception and make value the result (ctx.skip(value) is for before advice)",
        kind="skip",
        target=name,
    )
    error.__cause__ = exc
    return error


class RunnerOnRead(CallContext):
    """A ``CallContext`` that works ``runner`` out when advice first reads it.

    What the dispatch paths build where no dispatcher fills ``runner`` (layers, async
    calls, and, without ``__init__``, the dispatchers of join points that are not a
    runner's): most advice there never reads it, and working it out reads an attribute of
    the instance. Kept out of ``CallContext`` itself because a class with ``__getattr__``
    has every attribute read take the slow, generic path (the interpreter does not
    specialise reads on it), and a runner's join points read their contexts every
    iteration.
    """

    __slots__ = ()
    _runner_on_init = False

    def __getattr__(self, name: str) -> Any:
        # Only reached for an unset slot; ``runner`` is the one with a computed default.
        if name != "runner":
            raise AttributeError(f"{type(self).__name__!r} object has no attribute {name!r}")
        runner = self.runner = runner_of(self.instance)
        return runner


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
        # Reached for an unset slot too (an Event made without __init__, as copy and pickle
        # make one): reading ``payload`` here would recurse, and a dunder is never payload.
        if key in Event.__slots__ or key.startswith("__"):
            raise AttributeError(f"{type(self).__name__!r} object has no attribute {key!r}")
        try:
            return self.payload[key]
        except KeyError:
            raise AttributeError(
                f"event {self.name!r} has no payload key {key!r}; it has {sorted(self.payload)}"
            ) from None

    def __repr__(self) -> str:
        return f"Event({self.name!r}, payload={self.payload!r}, source={self.source!r})"
