"""``summarize``: the capped text ``Logged`` shows for an argument or a result.

``reprlib`` with caps: long text and big containers become their type and length,
array-likes their type, shape and dtype, and a failing ``repr`` ``'<unrepresentable T>'``.
Apart from ``_logged`` because it is about values, not logging: nothing here imports
structlog.
"""

from __future__ import annotations

import reprlib
from collections import deque
from typing import Any

__all__ = ["summarize"]

_SCALARS = frozenset((bool, float, complex, type(None)))
_BIG_INT = 10**18


class _Summary(reprlib.Repr):
    """``reprlib`` with our caps: long text and big containers become type and length,
    array-likes (``shape`` and ``dtype``) type, shape and dtype, and a failing ``repr``
    ``'<unrepresentable T>'``. Nothing is ever converted whole."""

    _SIZED = (list, tuple, dict, set, frozenset, deque)

    def __init__(self, max_length: int, max_items: int) -> None:
        super().__init__()
        self.maxlevel = 3
        self.maxstring = self.maxother = self.maxlong = max_length
        self.maxtuple = self.maxlist = self.maxset = self.maxfrozenset = max_items
        self.maxdeque = self.maxdict = self.maxarray = max_items
        self.limit = 4 * max_length
        # How much of a long value's start to show before "...": never a negative slice
        # end, which would take all but the last bytes of a buffer, however big.
        self._head = max(max_length - 3, 0)

    def repr1(self, x: Any, level: int) -> str:
        kind = type(x)  # the common small values first, without reprlib's dispatch
        if kind in _SCALARS or (kind is int and -_BIG_INT < x < _BIG_INT):
            return repr(x)
        if kind is str and len(x) <= self.maxstring:
            return repr(x)
        try:
            array = _array_summary(x)
            if array is not None:
                return array
            # Long text or bytes of a subclass (reprlib repr()s those whole): capped alike.
            if isinstance(x, str) and len(x) > self.maxstring:
                return self.repr_str(x, level)
            if isinstance(x, (bytes, bytearray)) and len(x) > self.maxstring:
                return self.repr_bytes(x, level)
            # reprlib sorts sets and dict keys before slicing: never on big ones.
            if isinstance(x, self._SIZED) and len(x) > self.maxlist:
                return f"<{type(x).__qualname__} len={len(x)}>"
            return str(super().repr1(x, level))
        except Exception:
            return _unrepresentable(x)

    def repr_str(self, x: str, level: int) -> str:
        if len(x) <= self.maxstring:
            return repr(x)
        return f"<{type(x).__qualname__} len={len(x)} {super().repr_str(x, level)}>"

    def repr_bytes(self, x: bytes | bytearray, level: int) -> str:
        if len(x) <= self.maxstring:
            return repr(x)
        head = repr(bytes(x[: self._head]))[:-1]  # a slice: never the whole buffer
        return f"<{type(x).__qualname__} len={len(x)} {head}...'>"

    repr_bytearray = repr_bytes

    def repr_memoryview(self, x: memoryview, level: int) -> str:
        # Its bytes, however many dimensions and whatever item format: nbytes and a cast
        # view slice only what is shown.
        flat = x.cast("B") if x.c_contiguous else None
        if flat is None:
            return f"<memoryview nbytes={x.nbytes} format={x.format!r} shape={x.shape}>"
        if x.nbytes <= self.maxstring:
            return repr(flat.tobytes())
        head = repr(flat[: self._head].tobytes())[:-1]
        return f"<memoryview nbytes={x.nbytes} {head}...'>"

    def repr_instance(self, x: Any, level: int) -> str:
        try:
            text = repr(x)
        except Exception:
            return _unrepresentable(x)
        if len(text) > self.maxother:
            return text[: self._head] + "..."
        return text

    def summary(self, x: Any) -> str:
        text = self.repr1(x, self.maxlevel)
        return text if len(text) <= self.limit else text[: self.limit - 3] + "..."


def _unrepresentable(x: Any) -> str:
    return f"<unrepresentable {type(x).__qualname__}>"


def _array_summary(x: Any) -> str | None:
    """``'<Tensor shape=(2, 3) dtype=torch.float32>'`` for tensors and arrays, else None."""
    if isinstance(x, type) or not (hasattr(x, "shape") and hasattr(x, "dtype")):
        return None
    shape = x.shape
    try:
        shape = tuple(shape)
    except TypeError:
        pass
    if shape == () and _on_host(x):  # a scalar (numpy.float32(1.5)): its value says more
        return None
    return f"<{type(x).__qualname__} shape={shape} dtype={x.dtype}>"


def _on_host(x: Any) -> bool:
    """Whether array-like ``x`` is in host memory, so reading its value is cheap.

    A 0-d tensor on an accelerator (a loss on ``cuda``) is read by its ``repr``, a copy to
    the host that waits for the device: such a scalar keeps its shape-and-dtype summary.
    ``device`` is a str for numpy arrays, a ``torch.device`` (``type``) or a JAX device
    (``platform``); an object without one (a numpy scalar) is taken to be on the host.
    """
    device = getattr(x, "device", "cpu")
    if not isinstance(device, str):
        device = getattr(device, "type", None) or getattr(device, "platform", None)
    return device == "cpu"


_DEFAULT_SUMMARY = _Summary(max_length=80, max_items=8)


def summarize(value: Any, *, max_length: int = 80, max_items: int = 8) -> str:
    """The capped text ``Logged`` shows for ``value``; never raises, never dumps big data.

    Strings and bytes over ``max_length`` (subclasses too) and containers over
    ``max_items`` items are summarised with their type and length, objects with ``shape``
    and ``dtype`` (tensors, arrays) by type, shape and dtype (a 0-d one in host memory by
    its value; on an accelerator, reading it would wait for the device), and a ``repr``
    that raises as ``'<unrepresentable T>'``.
    """
    if max_length == 80 and max_items == 8:
        return _DEFAULT_SUMMARY.summary(value)
    return _Summary(max_length, max_items).summary(value)
