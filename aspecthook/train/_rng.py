"""Capture and restore the random number generators a training run draws from.

Exact resume needs every generator back where it was when the checkpoint was taken:
python's ``random``, numpy's global generator (when numpy is installed), torch's CPU
generator and, when CUDA is in use, every CUDA device's generator. Dropout, shuffling
done in ``__getitem__``, random augmentation and initialisation all draw from these.

States are plain data, so a checkpoint holding them loads with
``torch.load(weights_only=True)``: byte tensors for torch, int64 tensors for the
Mersenne Twister keys of python and numpy (624 words each: one tensor record to save
instead of 624 pickled ints; lists of ints, as older checkpoints hold, restore too),
floats and ints for the rest. In a distributed run
each rank has its own generators; :func:`capture_all_ranks` gathers every rank's state
onto rank 0 (the one that writes checkpoints) and :func:`restore_own_rank` hands each
rank its own entry back.
"""

from __future__ import annotations

import array
import random
from collections.abc import Mapping, Sequence
from typing import Any

import torch

__all__ = ["RNGState", "capture", "capture_all_ranks", "restore", "restore_own_rank"]

#: One process's generator states, as plain data (see the module docstring).
RNGState = dict[str, Any]


def capture(generators: Mapping[str, torch.Generator] | None = None) -> RNGState:
    """This process's RNG states; ``generators`` adds private torch generators by name.

    CUDA states are captured only when CUDA has been initialised: a process that never
    touched the GPU has nothing drawn from it, and asking would create a CUDA context.
    """
    state: RNGState = {
        "python": _python_state(),
        "torch": torch.get_rng_state(),
        "generators": {name: g.get_state() for name, g in (generators or {}).items()},
    }
    numpy_state = _numpy_state()
    if numpy_state is not None:
        state["numpy"] = numpy_state
    if torch.cuda.is_available() and torch.cuda.is_initialized():  # type: ignore[no-untyped-call]
        state["cuda"] = torch.cuda.get_rng_state_all()
    return state


def restore(
    state: Mapping[str, Any], generators: Mapping[str, torch.Generator] | None = None
) -> None:
    """Put back what :func:`capture` returned; parts missing from ``state`` are left alone.

    Named ``generators`` are restored from the entries captured under the same names.
    """
    if "python" in state:
        _set_python_state(state["python"])
    if "numpy" in state:
        _set_numpy_state(state["numpy"])
    if "torch" in state:
        torch.set_rng_state(state["torch"])
    if "cuda" in state and torch.cuda.is_available():
        saved = list(state["cuda"])
        count = min(len(saved), torch.cuda.device_count())
        for device in range(count):
            torch.cuda.set_rng_state(saved[device], device)
    saved_generators = state.get("generators", {})
    for name, generator in (generators or {}).items():
        if name in saved_generators:
            generator.set_state(saved_generators[name])


def capture_all_ranks(
    generators: Mapping[str, torch.Generator] | None = None,
) -> list[RNGState]:
    """Every rank's :func:`capture`, in rank order, on rank 0 (others get ``[]``).

    Outside a distributed run (or with one process) this is ``[capture()]``. In a
    distributed run every rank must call it at the same point: it is a collective.
    """
    own = capture(generators)
    dist = torch.distributed
    if not (dist.is_available() and dist.is_initialized()) or dist.get_world_size() == 1:
        return [own]
    rank, size = dist.get_rank(), dist.get_world_size()
    gathered: list[Any] | None = [None] * size if rank == 0 else None
    dist.gather_object(own, gathered, dst=0)
    return list(gathered) if gathered is not None else []


def restore_own_rank(
    states: Sequence[Mapping[str, Any]],
    rank: int,
    generators: Mapping[str, torch.Generator] | None = None,
) -> bool:
    """Restore entry ``rank`` of ``states``; False when the checkpoint has none for it.

    A checkpoint written by fewer processes than now run has no state for the extra
    ranks; they keep their current generators (and the caller says so).
    """
    if rank >= len(states):
        return False
    restore(states[rank], generators)
    return True


def _python_state() -> dict[str, Any]:
    version, key, gauss = random.getstate()
    # Through array.array: a third of the time torch.tensor(key) takes for 625 ints.
    words = torch.frombuffer(array.array("q", key), dtype=torch.int64)
    return {"version": version, "key": words, "gauss": gauss}


def _set_python_state(state: Mapping[str, Any]) -> None:
    key = tuple(int(k) for k in _ints(state["key"]))
    random.setstate((int(state["version"]), key, state["gauss"]))


def _ints(key: Any) -> list[int]:
    """A saved key as ints: an int64 tensor, or a list of ints (older checkpoints)."""
    return key.tolist() if isinstance(key, torch.Tensor) else list(key)


def _numpy_state() -> dict[str, Any] | None:
    try:
        import numpy
    except ImportError:
        return None
    kind, key, pos, has_gauss, gauss = numpy.random.get_state(legacy=True)
    return {
        "kind": str(kind),
        "key": torch.from_numpy(numpy.asarray(key, dtype=numpy.int64)),
        "pos": int(pos),
        "has_gauss": int(has_gauss),
        "gauss": float(gauss),
    }


def _set_numpy_state(state: Mapping[str, Any]) -> None:
    try:
        import numpy
    except ImportError:
        return  # saved where numpy was installed, resumed where it is not: nothing to restore
    key = numpy.array(_ints(state["key"]), dtype=numpy.uint32)
    numpy.random.set_state(
        (state["kind"], key, int(state["pos"]), int(state["has_gauss"]), float(state["gauss"]))
    )
