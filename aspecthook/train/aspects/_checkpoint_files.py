"""The files of a ``Checkpoint``: crash-safe writes, the ``latest`` manifest, and finding
and checking the checkpoint to resume from.

Separate from ``_checkpoint`` (the aspect: when to save, what a checkpoint holds, how a
run resumes) because this is the folder alone: functions of paths, bytes and manifests,
the ones the writer thread runs beside training among them. The folder's layout and the
order of a write's steps are described in ``_checkpoint``'s module docstring.
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import os
import re
import secrets
import threading
import warnings
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import torch

from ..._files import fsync_dir
from ..._log import get_logger
from ...errors import RunnerError

__all__ = [
    "LATEST",
    "_FORMAT",
    "_TMP_SUFFIX",
    "_WriteJob",
    "_atomic_write",
    "_checkpoint_names",
    "_delete",
    "_digest",
    "_find",
    "_record",
    "_settled",
    "_write_manifest",
]

#: Name of the manifest (pointer) file in the checkpoint folder.
LATEST = "latest"
_FORMAT = 1
_TMP_SUFFIX = ".ckpt-tmp"
_O_BINARY = getattr(os, "O_BINARY", 0)  # Windows: no newline translation
_O_NOFOLLOW = getattr(os, "O_NOFOLLOW", 0)  # POSIX


class _Unusable(Exception):
    """A checkpoint that cannot be resumed from; the message says why."""


@dataclass(eq=False)
class _WriteJob:
    """One save handed to the writer thread: serialized bytes and where they go."""

    runner: Any
    folder: Path
    names: list[str]
    data: memoryview
    doomed: list[str]
    best: str | None
    epoch: int
    iter: int
    thread: threading.Thread = field(init=False)
    done: threading.Event = field(default_factory=threading.Event)
    error: BaseException | None = None


def _atomic_write(path: Path, data: bytes | memoryview) -> None:
    """Temp file in the same folder, write + fsync, ``os.replace``, fsync the folder.

    Plain ``os`` calls, not ``tempfile`` and file objects: this runs on the writer thread
    beside training, and every line of Python it runs holds the GIL the training thread
    needs. The temp name is random and created exclusively (``O_EXCL``: never an existing
    file or a link); ``before_run`` deletes those a killed process left.
    """
    tmp = path.with_name(f".{path.name}.{secrets.token_hex(6)}{_TMP_SUFFIX}")
    flags = os.O_WRONLY | os.O_CREAT | os.O_EXCL | _O_BINARY | _O_NOFOLLOW
    try:
        fd = os.open(tmp, flags, 0o666)
        try:
            view = memoryview(data)
            while view:
                view = view[os.write(fd, view) :]
            os.fsync(fd)
        finally:
            os.close(fd)
        os.replace(tmp, path)
    except BaseException:
        with contextlib.suppress(OSError):
            os.unlink(tmp)
        raise
    fsync_dir(path.parent)


def _digest(data: memoryview) -> dict[str, Any]:
    """The size and sha256 a manifest records for a checkpoint of these bytes."""
    return {"size": data.nbytes, "sha256": hashlib.sha256(data).hexdigest()}


def _record(path: Path) -> dict[str, Any]:
    """A manifest record for a file found without one (its iteration unknown)."""
    return {"size": path.stat().st_size, "sha256": _sha256(path), "epoch": None, "iter": -1}


def _settled(path: Path, record: dict[str, Any]) -> dict[str, Any]:
    """``record`` for the bytes ``path`` holds, without ``next``: the new bytes' if a write
    cut short after its replace left them (a resumed run adopts such records), else the old.

    A write onto the name again puts its own bytes in ``next``: the record must then name
    the file's current bytes, or a kill before that replace leaves a good file it rejects.
    Hashes the file only when the record has a ``next`` (a write was cut short).
    """
    following = record.get("next")
    if following is None:
        return record
    current = {k: v for k, v in record.items() if k != "next"}
    if isinstance(following, dict) and _holds(path, following):
        return {**current, **following}
    return current


def _holds(path: Path, version: dict[str, Any]) -> bool:
    """Whether ``path`` holds the bytes of this size and sha256."""
    if not path.is_file() or path.stat().st_size != version.get("size"):
        return False
    return _sha256(path) == version.get("sha256")


def _write_manifest(folder: Path, manifest: dict[str, Any]) -> None:
    # One line: the C encoder (an indented dump runs the pure-Python one).
    _atomic_write(folder / LATEST, json.dumps(manifest, sort_keys=True).encode())


def _delete(folder: Path, names: list[str]) -> None:
    for name in names:
        (folder / name).unlink(missing_ok=True)


def _read_manifest(
    folder: Path, action: str = "trying the checkpoint files in its folder", quiet: bool = False
) -> dict[str, Any] | None:
    """The folder's manifest; None if there is none, ``{}`` if unreadable (reported, with
    ``action``: what is done instead, unless ``quiet``: a rank other than 0)."""
    path = folder / LATEST
    if not path.is_file():
        return None
    try:
        manifest = json.loads(path.read_bytes())
        if not isinstance(manifest, dict) or not isinstance(manifest.get("checkpoints"), dict):
            raise ValueError("not a checkpoint manifest")
    except (OSError, ValueError) as exc:
        if not quiet:
            _report(path, f"unreadable manifest: {exc}", action)
        return {}
    return manifest


def _candidates(
    folder: Path, manifest: dict[str, Any], names: re.Pattern[str]
) -> list[tuple[Path, Any]]:
    """Files to try: ``latest`` first, then the others by iteration; without a manifest,
    the files whose names ``names`` matches (``_find`` then takes the furthest one)."""
    records: dict[str, Any] = manifest.get("checkpoints") or {}
    if not manifest:
        files = [p for p in folder.iterdir() if names.fullmatch(p.name) and p.is_file()]
        return [(p, None) for p in sorted(files)]
    latest = manifest.get("latest")
    order = sorted(records, key=lambda n: (n == latest, records[n].get("iter", -1)), reverse=True)
    return [(folder / name, records[name]) for name in order]


def _checkpoint_names(filename_tmpl: str) -> re.Pattern[str]:
    """The names a ``Checkpoint`` writes: its template's, ``iter_<n>.pt`` (a run stopped
    inside an epoch) and ``best_<metric>_<stamp>.pt``."""
    template = re.escape(filename_tmpl).replace(re.escape("{}"), r"\d+")
    return re.compile(rf"{template}|iter_\d+\.pt|best_.+\.pt")


def _find(
    source: Path, names: re.Pattern[str], *, quiet: bool = False
) -> tuple[Path, dict[str, Any], Any] | None:
    """(path, payload, manifest) of the checkpoint to resume from; None if there is none.
    The unusable files met are reported, unless ``quiet`` (ranks other than 0: every rank
    looks, rank 0 says what it found).

    Without a readable ``latest`` (a first save cut short before it, files copied without
    it) the folder's checkpoint files (``names``) are all tried and the one furthest into
    the run is used: their times may not say which that is (a copy renews them).
    """
    if source.is_file():
        unchecked = "loading the named file without a size and checksum to check it against"
        beside = _read_manifest(source.parent, unchecked, quiet) or {}
        record = (beside.get("checkpoints") or {}).get(source.name)
        try:
            return source, _load(source, record), beside
        except _Unusable as exc:
            raise RunnerError(
                f"cannot resume from {str(source)!r}: {exc}; give another checkpoint or "
                "resume='auto' to use the newest good one in work_dir"
            ) from None
    manifest = _read_manifest(source, quiet=quiet)
    if manifest is None:  # no manifest: the files themselves, as when it is unreadable
        manifest = {}
    candidates = _candidates(source, manifest, names)
    furthest: tuple[tuple[int, int], Path, dict[str, Any]] | None = None
    for path, record in candidates:
        try:
            payload = _load(path, record)
        except _Unusable as exc:
            if not quiet:
                action = "trying the previous one" if manifest else "trying the others"
                _report(path, str(exc), action)
            continue
        if manifest:
            return path, payload, manifest
        counters = payload["runner"].get("counters", {})
        progress = (int(counters.get("iter", -1)), int(counters.get("epoch", -1)))
        if furthest is None or progress > furthest[0]:
            furthest = (progress, path, payload)
    if furthest is not None:
        return furthest[1], furthest[2], manifest
    if candidates and not quiet:
        _report(source, "no usable checkpoint in this folder", "starting from scratch")
    return None


def _load(path: Path, record: Any) -> dict[str, Any]:
    """Load ``path``, first checking its size and sha256 against the manifest record."""
    if not path.is_file():
        raise _Unusable("the file is missing")
    if record is not None:
        # A record may also admit the bytes a write was replacing the file with (``next``):
        # a write cut short leaves the old file or the new one, and either is whole.
        versions = [record, record["next"]] if isinstance(record.get("next"), dict) else [record]
        size = path.stat().st_size
        sized = [v for v in versions if v.get("size") == size]
        if not sized:
            raise _Unusable(f"{size} bytes, the manifest says {record.get('size')} (truncated?)")
        if _sha256(path) not in {v.get("sha256") for v in sized}:
            raise _Unusable("sha256 differs from the manifest (corrupt)")
    try:
        payload = torch.load(path, map_location="cpu", weights_only=True)
    except Exception as exc:
        raise _Unusable(f"torch.load failed: {type(exc).__name__}: {exc}") from None
    if not isinstance(payload, dict) or payload.get("format") != _FORMAT or "runner" not in payload:
        raise _Unusable("not an aspecthook checkpoint of this version")
    return payload


def _sha256(path: Path) -> str:
    digest = hashlib.sha256()
    with path.open("rb") as file:
        for block in iter(lambda: file.read(1 << 20), b""):
            digest.update(block)
    return digest.hexdigest()


def _report(path: Path, reason: str, action: str) -> None:
    """Say which file is unusable and why, to the log and as a ``RuntimeWarning``."""
    get_logger().warning("checkpoint.unusable", path=str(path), reason=reason, action=action)
    message = f"checkpoint {path} is unusable ({reason}); {action}"
    warnings.warn(message, RuntimeWarning, stacklevel=2)
