"""aspecthook: declarative aspect-oriented instrumentation for Python.

Declare join points (``@joinpoint``), attach advice (``@before``, ``@after``,
``@on_error``, ``@around``, ``@on``), bundle advice into ``Aspect`` classes, and weave it
into code you do not own (``weave('pkg.mod.Class.method', ...)``). Every registration
returns a handle whose ``remove()`` undoes exactly it. See ``describe()`` for what runs
where.

``import aspecthook`` imports wrapt and the standard library only: structlog, rich and
PyYAML load on first use, and torch only through ``aspecthook.train``.

PYTEST_DONT_REWRITE: pytest, which rewrites the asserts of its plugins' packages (this one
has none), would otherwise warn under ``aspecthook run -m pytest`` that the package was
imported before pytest started.
"""

from __future__ import annotations

from . import errors
from ._advice import Advice, OrderNames
from ._aspect import Aspect, AspectOptions
from ._context import CallContext, Event, Proceed
from ._describe import Description, Row, describe
from ._handle import Handle
from ._joinpoint import JoinPoint
from ._pointcut import Glob, Name, Pointcut, PointcutLike, Predicate
from ._priority import Priority, PriorityLike
from ._tracking import track_calls
from ._weave import unweave, weave, woven
from ._weaver import Weaver, default_weaver

__version__ = "0.1.0"

joinpoint = default_weaver.joinpoint
before = default_weaver.before
after = default_weaver.after
on_error = default_weaver.on_error
around = default_weaver.around
on = default_weaver.on
emit = default_weaver.emit
register = default_weaver.register

__all__ = [
    "Advice",
    "Aspect",
    "AspectOptions",
    "CallContext",
    "Description",
    "Event",
    "Glob",
    "Handle",
    "JoinPoint",
    "Name",
    "OrderNames",
    "Pointcut",
    "PointcutLike",
    "Predicate",
    "Priority",
    "PriorityLike",
    "Proceed",
    "Row",
    "Weaver",
    "__version__",
    "after",
    "around",
    "before",
    "default_weaver",
    "describe",
    "emit",
    "errors",
    "joinpoint",
    "on",
    "on_error",
    "register",
    "track_calls",
    "unweave",
    "weave",
    "woven",
]
