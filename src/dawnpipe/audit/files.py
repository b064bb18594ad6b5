"""Finding submission files and reading them without trusting them.

Only regular files are opened, never through a symbolic link that leaves the
audited directory, never a path written inside a submission, and never more
than the size cap: the size is checked before reading and the read stops at
cap + 1 bytes, so a 100 MB log, a FIFO or /dev/zero costs neither time nor
memory.
"""

from __future__ import annotations

import os
import stat
from dataclasses import dataclass
from pathlib import Path

from dawnpipe.audit.model import FileAudit
from dawnpipe.errors import UsageError
from dawnpipe.tasks import all_tasks

KINDS = {("train", ".json"): "train-json", ("train", ".tsv"): "train-tsv", ("inference", ".json"): "inference"}


class Unreadable(Exception):
    """A file that cannot be audited: ``code`` and a reason for the message."""

    def __init__(self, code: str, text: str):
        super().__init__(text)
        self.code, self.text = code, text


def display(path: str) -> str:
    """A printable form of a path (bytes that are not UTF-8 shown as escapes)."""
    return os.fsencode(path).decode("utf-8", "backslashreplace")


def safe_text(value: str) -> str:
    """A string from a submission, made printable (lone surrogates escaped)."""
    return value.encode("utf-8", "backslashreplace").decode("utf-8")


@dataclass
class Found:
    files: list[FileAudit]
    skipped: int  # files outside any <Task>/<kind> directory (README, LICENSE, ...)


def _task_dirs() -> dict[str, str]:
    return {t.submission_dir: t.name for t in all_tasks().values()}


def classify(fs_path: str, shown: str) -> FileAudit | None:
    """The FileAudit of a file at ``<Task>/<kind>/<name>``; None when it is not in such a directory."""
    parts = Path(shown).parts
    name = parts[-1]
    kind_dir = parts[-2] if len(parts) >= 2 else ""
    task_dir = parts[-3] if len(parts) >= 3 else ""
    source = "/".join(parts[-3:])
    if kind_dir not in ("train", "inference"):
        return None
    tasks = _task_dirs()
    if task_dir not in tasks:
        f = FileAudit(shown, source, "other", None, fs_path=fs_path)
        hint = next((t for t in tasks if t.lower() == task_dir.lower()), None)
        f.add(
            "warning",
            "file.unknown-task",
            "file",
            f"unknown task directory {task_dir!r} (known: {', '.join(sorted(tasks))})"
            + (f"; did you mean {hint!r}? Names are case-sensitive" if hint else "")
            + "; not audited",
        )
        return f
    ext = os.path.splitext(name)[1]
    kind = KINDS.get((kind_dir, ext))
    if kind is None:
        f = FileAudit(shown, source, "other", tasks[task_dir], fs_path=fs_path)
        expected = ".json and .tsv" if kind_dir == "train" else ".json"
        f.add("warning", "file.not-a-submission", "file", f"not part of a submission (a {kind_dir}/ directory holds {expected} files); ignored, not opened")
        return f
    return FileAudit(shown, source, kind, tasks[task_dir], fs_path=fs_path)


def _outside(fs_path: str, root_real: str) -> str | None:
    """The target of a symbolic link that resolves outside ``root_real``, else None."""
    real = os.path.realpath(fs_path)
    if real != root_real and not real.startswith(root_real.rstrip(os.sep) + os.sep):
        return real
    return None


def find(paths: list[str]) -> Found:
    """Every file under ``paths`` that belongs to a submission layout, sorted by path."""
    files: dict[str, FileAudit] = {}
    skipped = 0
    for arg in paths:
        if not os.path.lexists(arg):
            raise UsageError(f"{display(arg)}: no such file or directory")
        if not os.path.isdir(arg):
            f = classify(arg, display(arg))
            if f is None:
                raise UsageError(f"{display(arg)}: not in a <Task>/train or <Task>/inference directory (Task one of {', '.join(sorted(_task_dirs()))})")
            files.setdefault(os.path.realpath(arg), f)
            continue
        root_real = os.path.realpath(arg)
        for dirpath, dirnames, filenames in os.walk(arg):
            # hidden directories (.git, ...) are not part of the layout; links to directories are not followed
            dirnames[:] = sorted(d for d in dirnames if not d.startswith(".") and not os.path.islink(os.path.join(dirpath, d)))
            for name in sorted(filenames):
                if name.startswith("."):
                    continue
                fs_path = os.path.join(dirpath, name)
                f = classify(fs_path, display(fs_path))
                if f is None:
                    skipped += 1
                    continue
                if os.path.islink(fs_path):
                    target = _outside(fs_path, root_real)
                    if target is not None:
                        f.add("error", "file.link-outside", "file", f"symbolic link to {display(target)}, outside the audited directory; not opened")
                files.setdefault(os.path.realpath(fs_path), f)
    ordered = sorted(files.values(), key=lambda f: f.path)
    _disambiguate(ordered)
    return Found(ordered, skipped)


def _disambiguate(files: list[FileAudit]) -> None:
    """Sources are <Task>/<kind>/<name>; where two audited roots hold the same one, use the paths."""
    seen: dict[str, int] = {}
    for f in files:
        seen[f.source] = seen.get(f.source, 0) + 1
    for f in files:
        if seen[f.source] > 1:
            f.source = f.path


def read_capped(f: FileAudit, cap: int) -> bytes:
    """The bytes of a regular file of at most ``cap`` bytes, or Unreadable."""
    flags = os.O_RDONLY | getattr(os, "O_NONBLOCK", 0) | getattr(os, "O_CLOEXEC", 0)
    try:
        fd = os.open(f.fs_path, flags)
    except OSError as e:
        raise Unreadable("file.unreadable", f"cannot be opened ({e.strerror})") from None
    try:
        st = os.fstat(fd)
        if not stat.S_ISREG(st.st_mode):
            raise Unreadable("file.not-regular", "not a regular file (a device, FIFO or socket); not read")
        f.size = st.st_size
        if st.st_size > cap:
            raise Unreadable("file.too-large", f"{st.st_size:,} bytes, over the size cap of {cap:,} bytes; not read")
        chunks, total = [], 0
        while total <= cap:
            chunk = os.read(fd, min(1 << 20, cap + 1 - total))
            if not chunk:
                break
            chunks.append(chunk)
            total += len(chunk)
        if total > cap:  # grew while being read
            raise Unreadable("file.too-large", f"over the size cap of {cap:,} bytes; not read")
        return b"".join(chunks)
    except OSError as e:
        raise Unreadable("file.unreadable", f"cannot be read ({e.strerror})") from None
    finally:
        os.close(fd)


def decode_text(data: bytes, f: FileAudit) -> str | None:
    """UTF-8 text with the harmless quirks (BOM, CRLF) reported as warnings; None (and an error) for binary data."""
    if data.startswith((b"\xff\xfe", b"\xfe\xff")):
        f.add("error", "file.utf16", "file", "UTF-16 text (byte-order mark FF FE / FE FF); submissions are UTF-8")
        return None
    nul = data.find(b"\x00")
    if nul >= 0:
        f.add("error", "file.binary", "file", f"binary data (a NUL byte at offset {nul}), not a text file")
        return None
    if data.startswith(b"\xef\xbb\xbf"):
        f.add("warning", "file.bom", "file", "UTF-8 byte-order mark before the first line (harmless; ignored)")
        data = data[3:]
    try:
        text = data.decode("utf-8")
    except UnicodeDecodeError as e:
        f.add("error", "file.not-utf8", "file", f"not UTF-8 text (byte 0x{data[e.start]:02x} at offset {e.start})")
        return None
    if "\r\n" in text:
        f.add("warning", "file.crlf", "file", "CRLF line ends (harmless; read as LF)")
        text = text.replace("\r\n", "\n")
    if "\r" in text:
        f.add("warning", "file.cr", "file", "carriage returns without a line feed (read as line ends)")
        text = text.replace("\r", "\n")
    return text
