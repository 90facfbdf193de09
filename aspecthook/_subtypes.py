"""Following a class's subclasses: a weave of ``'pkg.mod.Base+.method'`` also weaves the
subclasses of ``Base`` created after it that define their own ``method``.

Python calls ``__init_subclass__`` for every new subclass (class statement or
``type(name, bases, ns)``), looking it up through the new class's MRO, so ``Base`` gets
one wrapt ``FunctionWrapper`` around its ``__init_subclass__`` (its own or the one it
inherits), however many weaves follow it. The wrapper calls the original first, with
every argument, then weaves the new class's own matching methods for each weave that
follows ``Base``. When the last of those weaves is removed, the wrapper comes off: one
put where ``Base`` had no ``__init_subclass__`` of its own is deleted, so
``Base.__dict__`` is as it was. Finding the sites is ``_targets``' job.
"""

from __future__ import annotations

import inspect
import weakref
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import wrapt

from ._install import _install_all, _release
from ._joinpoint import JoinPointProxy
from ._log import get_logger
from ._proxy import find_proxy
from ._registry import LOCK
from ._targets import _own_sites, _resolve_path, _subclasses, _subtype_class, _subtype_parts
from .errors import WeaveTargetError

if TYPE_CHECKING:
    from ._weave import WeaveRecord
    from ._weaver import Weaver

__all__: list[str] = []  # helpers of weave() only: nothing here is API

_HOOK = "__init_subclass__"


@dataclass(eq=False)
class _Follower:
    """One weave of ``'pkg.mod.Base+.<pattern>'`` following ``Base``'s new subclasses."""

    record: WeaveRecord
    pattern: str
    weaver: Weaver
    strict: bool


class _SubclassHook:
    """The wrapper function around one class's ``__init_subclass__``, and its followers.

    It holds the class and its wrapper weakly: the class holds the wrapper, which holds
    this, and a woven class must stay collectable."""

    def __init__(self, base: type) -> None:
        self.base_ref: weakref.ref[type[Any]] = weakref.ref(base)
        self.wrapper_ref: weakref.ref[Any] | None = None
        self.followers: list[_Follower] = []
        self.own = _HOOK in vars(base)  # else the wrapper stands in for the inherited one

    @property
    def stands_in(self) -> bool:
        """Whether the wrapper stands in for an inherited ``__init_subclass__`` (it is no
        method of the class's own: ``_targets._stands_in``)."""
        return not self.own

    def __call__(self, wrapped: Any, instance: Any, args: Any, kwargs: Any) -> Any:
        new = getattr(wrapped, "__self__", instance)  # the class being created
        base = self.base_ref()
        if self.own or base is None or not inspect.isclass(new):
            result = wrapped(*args, **kwargs)
        else:
            # What Base inherits is looked up now, not taken from when the wrapper was
            # put: a class above Base hooked later (another '+' weave) must run too.
            inherited = super(base, new).__init_subclass__  # type: ignore[misc]  # new < base
            result = inherited(*args, **kwargs)
        if self.followers and inspect.isclass(new):
            _weave_subclass(new, self)
        return result

    def installed(self, base: type) -> bool:
        """Whether the wrapper is still in ``base``'s ``__init_subclass__`` chain."""
        wrapper = self.wrapper_ref() if self.wrapper_ref is not None else None
        if wrapper is None:
            return False
        _, _, current = wrapt.resolve_path(base, _HOOK)
        return wrapt.find_wrapper(current, wrapper) is not None


#: The hook of each followed class, and the hook each weave follows through.
_HOOKS: weakref.WeakKeyDictionary[type, _SubclassHook] = weakref.WeakKeyDictionary()
_FOLLOWING: weakref.WeakKeyDictionary[WeaveRecord, _SubclassHook] = weakref.WeakKeyDictionary()


def weave_subtypes(record: WeaveRecord, path: str, weaver: Weaver, strict: bool) -> None:
    """Weave ``'pkg.mod.Base+.method'`` (its module imported) for ``record``: ``Base`` and
    its subclasses now, and its subclasses created from now on.

    The hook is armed before the subclasses are listed, under the registry lock that the
    hook takes too, so a class created meanwhile on another thread is woven once."""
    _, pattern = _subtype_parts(path) or (path, "")
    with LOCK:
        base = _subtype_class(path)
        _follow(record, base, pattern, weaver, strict)
        try:
            points = _install_all(_resolve_path(path), record.names, weaver)
        except BaseException:
            unfollow(record)
            raise
        record.points.update(points)
        record.status = "active"


def following(record: WeaveRecord) -> bool:
    """Whether ``record`` weaves subclasses as they are created."""
    return record in _FOLLOWING


def waiting_note(record: WeaveRecord) -> str:
    """What ``describe()`` says of a weave that follows a class while nothing it weaves is
    there (none yet, or all collected since), or ``""`` (also once the class is gone)."""
    hook = _FOLLOWING.get(record)
    if hook is None or record.points or hook.base_ref() is None:
        return ""
    pattern = next((f.pattern for f in hook.followers if f.record is record), "")
    base_path = record.target.partition("+")[0].replace(":", ".")
    return (
        f"nothing matches yet: woven when a subclass of {base_path} that defines {pattern} "
        "is created"
    )


def overridden_note(jp: Any) -> str:
    """What ``describe()`` says of a method woven on a class whose loaded subclasses
    define their own (``'torch.optim.Optimizer.step'``: ``SGD.step`` is another function,
    which calls to an ``SGD`` run without reaching the woven one), or ``""``: the
    overrides that are woven themselves (``'Base+.m'``) are not counted."""
    if jp.declared or jp.site is None:
        return ""
    holder, attr = jp.site[0](), jp.site[1]
    if not isinstance(holder, type) or attr.startswith("__"):
        return ""
    overriding = [
        sub
        for sub in _subclasses(holder)
        if attr in vars(sub) and find_proxy(vars(sub)[attr]) is None
    ]
    if not overriding:
        return ""
    names = ", ".join(sorted({sub.__qualname__ for sub in overriding})[:4])
    more = ", ..." if len(overriding) > 4 else ""
    path = f"{holder.__module__}.{holder.__qualname__}"
    return (
        f"overridden in {len(overriding)} loaded subclass{'es' if len(overriding) > 1 else ''}"
        f" ({names}{more}), whose calls reach it only through super(): weave "
        f"'{path}+.{attr}' to reach theirs too"
    )


def unfollow(record: WeaveRecord) -> None:
    """Stop weaving new subclasses for ``record``; the last weave following a class takes
    the hook off it."""
    with LOCK:
        hook = _FOLLOWING.pop(record, None)
        if hook is None:
            return
        hook.followers = [f for f in hook.followers if f.record is not record]
        base = hook.base_ref()
        if not hook.followers and base is not None:
            _unhook(base, hook)


def _follow(record: WeaveRecord, base: type, pattern: str, weaver: Weaver, strict: bool) -> None:
    hook = _HOOKS.get(base)
    if hook is None or not hook.installed(base):
        hook = _hook(base)
    hook.followers.append(_Follower(record, pattern, weaver, strict))
    _FOLLOWING[record] = hook


def _hook(base: type) -> _SubclassHook:
    """Put a hook around ``base``'s ``__init_subclass__``."""
    hook = _SubclassHook(base)
    try:
        wrapper = wrapt.wrap_function_wrapper(base, _HOOK, hook)
    except (AttributeError, TypeError) as exc:  # a metaclass that refuses the attribute
        name = f"{base.__module__}.{base.__qualname__}"
        raise WeaveTargetError(
            f"cannot follow the subclasses of {name}: its {_HOOK} cannot be replaced "
            f"({type(exc).__name__}: {exc}); weave each subclass's method by its path",
            target=name,
        ) from exc
    hook.wrapper_ref = weakref.ref(wrapper)
    _HOOKS[base] = hook
    return hook


def _unhook(base: type, hook: _SubclassHook) -> None:
    """Take ``hook`` off ``base``; under a plain wrapper it stays, weaving nothing.

    One that stands in for an inherited ``__init_subclass__`` is deleted: putting back
    what it wrapped would shadow a class above ``Base`` hooked since."""
    wrapper = hook.wrapper_ref() if hook.wrapper_ref is not None else None
    if wrapper is None:
        _HOOKS.pop(base, None)
        return
    try:
        if not hook.own and vars(base).get(_HOOK) is wrapper:
            delattr(base, _HOOK)
        else:  # Base's own, or ours under another wrapt wrapper: spliced out
            wrapt.unwrap_object(base, _HOOK, wrapper, missing_ok=True)
    except wrapt.WrapperNotOutermostError as exc:
        name = f"{base.__module__}.{base.__qualname__}.{_HOOK}"
        get_logger().warning("weave.unwrap_failed", target=name, reason=str(exc))
    else:
        _HOOKS.pop(base, None)


def _weave_subclass(new: type, hook: _SubclassHook) -> None:
    """Weave the class ``new`` for each weave that follows the class ``hook`` is on.

    A failure is logged (``weave.failed``) and leaves the class as created, unless the
    weave was strict: then the class statement raises it."""
    with LOCK:
        for follower in list(hook.followers):
            record = follower.record
            sites = _own_sites(new, follower.pattern)
            if record.cancelled or not sites:
                continue
            try:
                for cls, attr in sites:
                    _drop_copied_proxy(cls, attr)
                points = _install_all(sites, record.names, follower.weaver)
            except Exception as exc:
                name = f"{new.__module__}.{new.__qualname__}"
                get_logger().warning("weave.failed", target=name, reason=str(exc))
                if follower.strict:
                    raise
                continue
            for jp in points:
                if jp in record.points:  # listed by weave_subtypes while being created
                    _release(jp, record.names, follower.weaver)
            record.points.update(points)


def _drop_copied_proxy(cls: type, attr: str) -> None:
    """Put back the callable under a proxy that ``cls`` was created with but that a weave
    put on another class, so that ``cls`` gets a proxy of its own.

    ``dataclass(slots=True)`` makes its class again from the first one's ``__dict__``,
    proxies included; removal takes a proxy off only where it was put, so a shared one
    would stay in the new class, and its calls would count as the first class's."""
    value = vars(cls)[attr]
    if type(value) is not JoinPointProxy:  # none, or under another wrapper: as it is
        return
    jp = value._self_joinpoint
    if jp.declared or jp.site is None or (jp.site[0]() is cls and jp.site[1] == attr):
        return
    setattr(cls, attr, value.__wrapped__)
