"""The files of a ``Checkpoint``: crash-safe writes, the ``latest`` manifest, and finding
and checking the checkpoint to resume from.

Separate from ``_checkpoint`` (the aspect: when to save, what a checkpoint holds) and
``_checkpoint_resume`` (how a run resumes) because this is the folder alone: functions of
paths, bytes and manifests, the ones the writer thread runs beside training among them.
The folder's layout and the order of a write's steps are described in ``_checkpoint``'s
module docstring.
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import os
import pickle
import re
import secrets
import threading
import warnings
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, TypeGuard

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
    "_check_unlisted",
    "_checkpoint_names",
    "_delete",
    "_digest",
    "_find",
    "_listed",
    "_other_folder_error",
    "_other_run_error",
    "_plain_name",
    "_read_latest",
    "_record",
    "_settled",
    "_undeletable_error",
    "_write_error",
    "_write_manifest",
]

#: Name of the manifest (pointer) file in the checkpoint folder.
LATEST = "latest"
_FORMAT = 1
_TMP_SUFFIX = ".ckpt-tmp"
_O_BINARY = getattr(os, "O_BINARY", 0)  # Windows: no newline translation
_O_NOFOLLOW = getattr(os, "O_NOFOLLOW", 0)  # POSIX
#: The fields of a manifest's record of one checkpoint and their types.
_RECORD = {"size": int, "sha256": str, "iter": int}


class _Unusable(Exception):
    """A checkpoint that cannot be resumed from; the message says why. ``foreign``: the
    file loads but holds no checkpoint of ours (another tool's), so it is no damaged
    checkpoint a save may write over (``_check_unlisted``)."""

    def __init__(self, reason: str, *, foreign: bool = False) -> None:
        super().__init__(reason)
        self.foreign = foreign


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
    step: str = ""  # the file being written when it failed ("latest": the manifest)
    moved: bool = False  # the manifest names the new files: only deletions were left


def _write_error(job: _WriteJob) -> RunnerError:
    """The error a failed write raises on the training thread: which file, and whether
    ``latest`` still names the checkpoint before (it does unless only deletions failed)."""
    cause = f"{type(job.error).__name__}: {job.error}"
    folder = str(job.folder)
    if job.moved:
        return RunnerError(
            f"Checkpoint wrote {', '.join(job.names)} in {folder!r} and 'latest' names it, "
            f"but could not delete {', '.join(job.doomed)}, which it drops ({cause}): fix "
            "the folder's permissions and resume (a resume deletes them)"
        )
    names = ", ".join(job.names)
    what = f"the manifest 'latest' for {names}" if job.step == LATEST else job.step or names
    error = job.error
    if isinstance(error, FileNotFoundError) and str(error.filename).endswith(_TMP_SUFFIX):
        return RunnerError(  # deleted as a killed run's by a run that started in the folder
            f"Checkpoint could not write {what} in {folder!r}: its temp file was deleted "
            "while it was written, as a run starting in a folder deletes those a killed run "
            "left; another run writes checkpoints to this folder: give each run its own "
            "work_dir, and resume this one from its own"
        )
    return RunnerError(
        f"Checkpoint could not write {what} in {folder!r} ({cause}); 'latest' still names "
        "the last complete checkpoint: free space or fix the folder's permissions and resume"
    )


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


def _write_manifest(folder: Path, manifest: dict[str, Any]) -> bytes:
    """Write ``manifest`` as ``latest``; return the bytes written."""
    # One line: the C encoder (an indented dump runs the pure-Python one).
    data = json.dumps(manifest, sort_keys=True).encode()
    _atomic_write(folder / LATEST, data)
    return data


def _read_latest(folder: Path) -> bytes | None:
    """The bytes of the folder's ``latest``; None if there is none (or it cannot be read:
    its reader reports that)."""
    try:
        return (folder / LATEST).read_bytes()
    except OSError:
        return None


def _listed(latest: bytes | None) -> frozenset[str]:
    """The file names a manifest of these bytes lists (kept, or to delete); none if it is
    missing or not a manifest a ``Checkpoint`` writes."""
    if latest is None:
        return frozenset()
    try:
        manifest: Any = json.loads(latest)
        _check_manifest(manifest)
    except ValueError:  # not JSON, not UTF-8, or not a manifest
        return frozenset()
    return frozenset([*manifest["checkpoints"], *manifest.get("delete", [])])


def _check_unlisted(path: Path, listed: frozenset[str]) -> None:
    """Refuse to write over a file that no manifest lists (``listed``) unless it holds a
    checkpoint of this format, as a write killed before its manifest leaves: a file of the
    user's that has a checkpoint's name is never replaced."""
    if path.name in listed or not os.path.lexists(path):
        return
    if not _is_checkpoint(path):
        raise RunnerError(
            f"Checkpoint will not write over {str(path)!r}: the file is not a checkpoint "
            "the manifest 'latest' lists, nor one of this format; move it out of the "
            "folder, or give the runner another work_dir ('latest' still names the last "
            "complete checkpoint)"
        )
    get_logger().info("checkpoint.unlisted_replaced", path=str(path))


def _is_checkpoint(path: Path) -> bool:
    """Whether ``path`` holds a checkpoint of this format (memory-mapped: its tensors are
    not read)."""
    try:
        payload = torch.load(path, map_location="cpu", weights_only=True, mmap=True)
    except Exception:
        return False
    return _is_ours(payload)


def _is_ours(payload: Any) -> TypeGuard[dict[str, Any]]:
    """Whether a loaded file's ``payload`` is a checkpoint of this format."""
    return isinstance(payload, dict) and payload.get("format") == _FORMAT and "runner" in payload


def _delete(folder: Path, names: list[str]) -> None:
    for name in names:
        (folder / name).unlink(missing_ok=True)


def _other_folder_error(folder: Path, known: Path) -> RunnerError:
    """The error of a save to ``folder`` by a ``Checkpoint`` whose records are ``known``'s."""
    return RunnerError(
        f"Checkpoint: this aspect last saved to {str(known)!r} and keeps that folder's "
        f"records, so it cannot write the manifest of {str(folder)!r}: give each runner its "
        "own Checkpoint"
    )


def _other_run_error(folder: Path) -> RunnerError:
    """The error of a save that finds ``latest`` changed since this run wrote or read it."""
    return RunnerError(
        f"Checkpoint: {str(folder / LATEST)!r} changed since this run last wrote or read "
        "it: another run writes checkpoints to this folder; give each run its own "
        "work_dir, and resume this one from its own"
    )


def _undeletable_error(exc: OSError, resumed_from: Path) -> RunnerError:
    """The error of a resume that cannot delete a file its manifest dropped."""
    return RunnerError(
        f"Checkpoint resumed from {str(resumed_from)!r} but could not delete "
        f"{exc.filename!r}, which its manifest drops ({type(exc).__name__}: "
        f"{exc.strerror or exc}): fix the folder's permissions, or delete the file, and "
        "run again"
    )


def _read_manifest(
    folder: Path, action: str = "trying the checkpoint files in its folder", quiet: bool = False
) -> dict[str, Any] | None:
    """The folder's manifest; None if there is none, ``{}`` if unreadable (reported, with
    ``action``: what is done instead, unless ``quiet``: a rank other than 0)."""
    path = folder / LATEST
    if not path.is_file():
        return None
    try:
        manifest: dict[str, Any] = json.loads(path.read_bytes())
        if isinstance(manifest, dict):  # a newer format first: its fields may differ
            _check_format(path, manifest.get("format"), "manifest")
        _check_manifest(manifest)
    except RunnerError:
        raise  # a newer format (a ValueError too): an error, not a manifest to skip
    except (OSError, ValueError) as exc:
        if not quiet:
            _report(path, f"unreadable manifest: {exc}", action)
        return {}
    return manifest


def _check_manifest(manifest: Any) -> None:
    """Raise ``ValueError`` unless ``manifest`` is one this version wrote (or one it may
    read): its names are plain file names, as it deletes files by them and loads them."""
    if not isinstance(manifest, dict) or not isinstance(manifest.get("checkpoints"), dict):
        raise ValueError("not a checkpoint manifest")
    records: dict[Any, Any] = manifest["checkpoints"]
    delete = manifest.get("delete", [])
    if not isinstance(delete, list):
        raise ValueError(f"'delete' is {delete!r}, not a list of file names")
    for name in [*records, *delete, manifest.get("latest"), manifest.get("best")]:
        if name is not None and not _plain_name(name):
            raise ValueError(f"{name!r} is not the name of a file in its folder")
    for name, record in records.items():
        if not isinstance(record, dict) or not all(
            type(record.get(key)) is kind for key, kind in _RECORD.items()
        ):
            raise ValueError(f"the record of {name!r} is not a size, sha256 and iteration")


def _plain_name(name: Any) -> bool:
    """Whether ``name`` names a file in the folder itself (no path, not the manifest)."""
    if not isinstance(name, str) or name in ("", ".", "..", LATEST):
        return False
    return not any(sep in name for sep in ("/", os.sep, os.altsep or "/"))


def _check_format(path: Path, value: Any, what: str) -> None:
    """A ``format`` newer than this version's is an error, not a file to skip: resuming
    without it would start afresh and overwrite the newer version's checkpoints."""
    if type(value) is int and value > _FORMAT:
        raise RunnerError(
            f"checkpoint {what} {str(path)!r} is of format {value}, written by a newer "
            f"aspecthook (this one reads format {_FORMAT}): upgrade aspecthook to resume "
            "from it, or give another work_dir"
        )


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
    source: Path,
    names: re.Pattern[str],
    *,
    quiet: bool = False,
    unusable: list[Path] | None = None,
) -> tuple[Path, dict[str, Any], Any] | None:
    """(path, payload, manifest) of the checkpoint to resume from; None if there is none,
    an error if there are some and none is usable. The unusable files met are reported,
    unless ``quiet`` (ranks other than 0: every rank looks, rank 0 says what it found),
    and the damaged ones (not another tool's files) added to ``unusable``.

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
            if unusable is not None and not exc.foreign:
                unusable.append(path)
            continue
        if manifest:
            return path, payload, manifest
        counters = payload["runner"].get("counters", {})
        progress = (int(counters.get("iter", -1)), int(counters.get("epoch", -1)))
        if furthest is None or progress > furthest[0]:
            furthest = (progress, path, payload)
    if furthest is not None:
        return furthest[1], furthest[2], manifest
    if candidates:  # a fresh start would write over them (and over 'latest')
        raise RunnerError(
            f"cannot resume from {str(source)!r}: it holds checkpoints, but none is usable "
            "(each is named in a warning above); move them and 'latest' out of the folder "
            "to start afresh, or give resume= a checkpoint that is usable"
        )
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
        raise _Unusable(_load_failure(exc), foreign=_refused(exc)) from None
    if isinstance(payload, dict):
        _check_format(path, payload.get("format"), "file")
    if not _is_ours(payload):
        raise _Unusable("not an aspecthook checkpoint of this version", foreign=True)
    return payload


#: The class ``torch.load(weights_only=True)`` refused, as its message names it.
_REFUSED = re.compile(r"GLOBAL (\S+) was not an allowed global")


def _load_failure(exc: Exception) -> str:
    """Why ``torch.load`` failed: for an object ``weights_only=True`` refuses (a class of
    the file's own, which no checkpoint of ours holds), what it is and what to do, in place
    of torch's page-long message; any other error as it is."""
    if not _refused(exc):
        return f"torch.load failed: {type(exc).__name__}: {exc}"
    found = _REFUSED.search(str(exc))
    return (
        "it holds objects that torch.load(weights_only=True) does not load"
        f"{f' ({found.group(1)})' if found else ''}, so Checkpoint did not write it. To start "
        "from weights in it, re-save them as a plain state dict where you trust the file "
        "(torch.save(model.state_dict(), path)) and load that into the model before run(), "
        "without resume="
    )


def _refused(exc: Exception) -> bool:
    """Whether ``torch.load(weights_only=True)`` refused an object of the file's (which no
    checkpoint of ours holds), rather than failing to read it."""
    return isinstance(exc, pickle.UnpicklingError) and "Weights only load failed" in str(exc)


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
