"""Atomic writes: a reader (or Snakemake, or DVC) sees the old file or the
whole new one, never half of it; a crash leaves only a hidden temporary."""

from __future__ import annotations

import contextlib
import json
import os
import tempfile
from collections.abc import Iterator
from pathlib import Path
from typing import Any


@contextlib.contextmanager
def atomic_path(path: str | os.PathLike) -> Iterator[Path]:
    """Yield a temporary path beside ``path``; rename it over ``path`` on success.

    What already stands at ``path`` is honoured, not replaced: a symbolic link
    is written through (its target is renamed over), a character device or a
    pipe (``--json /dev/stdout``) is written to directly, since a stream cannot
    be half-overwritten; a directory is refused by its own name."""
    from dawnpipe.errors import DawnpipeError

    path = Path(path)
    if path.is_symlink():
        path = Path(os.path.realpath(path))
    if path.is_dir():
        raise DawnpipeError(f"{path}: is a directory, not a file to write")
    if path.exists() and not path.is_file():  # a device or a FIFO
        yield path
        return
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.", suffix=".tmp", dir=path.parent)
    os.close(fd)
    tmp_path = Path(tmp)
    os.chmod(tmp_path, 0o666 & ~_UMASK)  # mkstemp makes 0600; give the usual mode
    try:
        yield tmp_path
        os.replace(tmp_path, path)
    finally:
        with contextlib.suppress(FileNotFoundError):
            tmp_path.unlink()


def _read_umask() -> int:
    mask = os.umask(0)
    os.umask(mask)
    return mask


_UMASK = _read_umask()  # once, at import: os.umask is process-wide, not thread-safe


def write_text(path: str | os.PathLike, text: str) -> None:
    with atomic_path(path) as tmp:
        tmp.write_text(text, encoding="utf-8")


def write_bytes(path: str | os.PathLike, data: bytes) -> None:
    with atomic_path(path) as tmp:
        tmp.write_bytes(data)


def write_json(path: str | os.PathLike, obj: Any) -> None:
    write_text(path, json.dumps(obj, indent=2, sort_keys=False, allow_nan=False, default=str) + "\n")


def write_parquet(path: str | os.PathLike, frame) -> None:
    with atomic_path(path) as tmp:
        frame.to_parquet(tmp, index=False)


def write_csv(path: str | os.PathLike, frame, **kwargs) -> None:
    with atomic_path(path) as tmp:
        frame.to_csv(tmp, index=False, **kwargs)


def read_json(path: str | os.PathLike) -> Any:
    from dawnpipe.errors import DawnpipeError

    try:
        with open(path, encoding="utf-8") as f:
            return json.load(f)
    except json.JSONDecodeError as e:
        raise DawnpipeError(f"{path}: not valid JSON (line {e.lineno}, column {e.colno}: {e.msg})") from None
    except UnicodeDecodeError as e:
        raise DawnpipeError(f"{path}: not UTF-8 text (byte {e.start}: {e.reason})") from None
