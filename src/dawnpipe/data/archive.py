"""Unpacking an untrusted archive (zip, tar, tar.gz) safely.

Every entry is checked before anything is written, and the whole archive is
refused, with one line naming the entry and the reason, when one entry is:
an absolute path, a path with ``..``, a backslash or a control character, a
symbolic or hard link, a device or any other non-regular file, a second copy
of a name, or beyond the size caps (an entry, all entries, their number;
sizes are counted as the bytes are written, not trusted from headers). Files
are written by this module alone (never ``extractall``), into a temporary
directory beside the destination that replaces it only once every entry is
written; nothing in the archive is run. A single top folder (GitHub's
``<repo>-<branch>/``) is stripped.
"""

from __future__ import annotations

import shutil
import stat
import tarfile
import zipfile
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import IO

from dawnpipe.errors import DawnpipeError

CHUNK = 1 << 20


@dataclass(frozen=True)
class Limits:
    entries: int = 20_000
    entry_bytes: int = 64 << 20  # one file
    total_bytes: int = 512 << 20  # all files, unpacked


@dataclass(frozen=True)
class Entry:
    name: str
    kind: str  # "file", "dir", or what else it is (refused)
    size: int
    open: Callable[[], IO[bytes]] | None


def kind_of(path: Path) -> str:
    with open(path, "rb") as f:
        head = f.read(4)
    if head[:4] in (b"PK\x03\x04", b"PK\x05\x06"):
        return "zip"
    if head[:2] == b"\x1f\x8b":
        return "tar.gz"
    if tarfile.is_tarfile(path):
        return "tar"
    raise DawnpipeError(f"{path}: not a zip or tar archive")


def _zip_entries(z: zipfile.ZipFile) -> Iterator[Entry]:
    for info in z.infolist():
        mode = info.external_attr >> 16
        if stat.S_ISLNK(mode):
            kind = "symbolic link"
        elif info.is_dir():
            kind = "dir"
        elif stat.S_IFMT(mode) not in (0, stat.S_IFREG):  # many zips give permission bits alone (no file type)
            kind = "special file"
        else:
            kind = "file"
        yield Entry(info.filename, kind, info.file_size, (lambda info=info: z.open(info)) if kind == "file" else None)


def _tar_entries(t: tarfile.TarFile) -> Iterator[Entry]:
    for m in t:
        if m.isreg():
            kind = "file"
        elif m.isdir():
            kind = "dir"
        elif m.issym():
            kind = "symbolic link"
        elif m.islnk():
            kind = "hard link"
        else:
            kind = "special file"
        yield Entry(m.name, kind, m.size, (lambda m=m: t.extractfile(m)) if kind == "file" else None)


def safe_parts(name: str) -> tuple[str, ...] | str:
    """The path parts of an entry name, or why it is refused."""
    if any(ord(c) < 32 or ord(c) == 127 for c in name):
        return "a control character in its name"
    if "\\" in name:
        return "a backslash in its name (a Windows path)"
    if name.startswith("/") or (len(name) > 1 and name[1] == ":"):
        return "an absolute path"
    parts = tuple(p for p in name.split("/") if p not in ("", "."))
    if ".." in parts:
        return "a path leaving the destination ('..')"
    if not parts:
        return "an empty name"
    return parts


def unpack(archive: Path, dest: Path, *, limits: Limits = Limits()) -> list[str]:
    """Unpack ``archive`` into ``dest`` (replaced whole, only on success);
    returns the files written (POSIX paths relative to ``dest``)."""
    kind = kind_of(archive)
    tmp = dest.parent / f".{dest.name}.unpacking"
    if tmp.exists():
        shutil.rmtree(tmp)
    tmp.mkdir(parents=True)
    try:
        if kind == "zip":
            try:
                with zipfile.ZipFile(archive) as z:
                    written = _write_all(archive, list(_zip_entries(z)), tmp, limits)
            except (zipfile.BadZipFile, zipfile.LargeZipFile, NotImplementedError, EOFError) as e:
                raise DawnpipeError(f"{archive}: a broken zip archive ({e}); nothing was unpacked") from None
        else:
            try:
                with tarfile.open(archive, "r:gz" if kind == "tar.gz" else "r:") as t:
                    written = _write_all(archive, list(_tar_entries(t)), tmp, limits)
            except (tarfile.TarError, EOFError, OSError) as e:
                raise DawnpipeError(f"{archive}: a broken tar archive ({e}); nothing was unpacked") from None
        root = _strip_top(tmp, written)
        if dest.exists():
            shutil.rmtree(dest)
        root.rename(dest)
        return sorted(w[len(root.relative_to(tmp).as_posix()) + 1 :] if root != tmp else w for w in written)
    finally:
        if tmp.exists():
            shutil.rmtree(tmp)


def _refuse(archive: Path, name: str, reason: str) -> DawnpipeError:
    return DawnpipeError(f"{archive}: entry {name!r} refused: {reason}; nothing was unpacked (the archive is untrusted input)")


def _write_all(archive: Path, entries: list[Entry], tmp: Path, limits: Limits) -> list[str]:
    if len(entries) > limits.entries:
        raise DawnpipeError(f"{archive}: {len(entries)} entries, more than the {limits.entries} allowed; nothing was unpacked")
    checked = []
    for e in entries:  # every entry checked before anything is written
        parts = safe_parts(e.name)
        if isinstance(parts, str):
            raise _refuse(archive, e.name, parts)
        if e.kind not in ("file", "dir"):
            raise _refuse(archive, e.name, f"a {e.kind}")
        if e.kind == "file" and e.size > limits.entry_bytes:
            raise _refuse(archive, e.name, f"{e.size} bytes, more than the {limits.entry_bytes} allowed for one file")
        checked.append((e, parts))
    seen: set[tuple[str, ...]] = set()
    total = 0
    written = []
    for e, parts in checked:
        target = tmp.joinpath(*parts)
        if e.kind == "dir":
            target.mkdir(parents=True, exist_ok=True)
            continue
        if parts in seen:
            raise _refuse(archive, e.name, "a second entry of the same name")
        seen.add(parts)
        try:
            target.parent.mkdir(parents=True, exist_ok=True)
            out = open(target, "xb")  # 'x': never through anything already there
        except OSError as err:  # a file where a folder of this path is, or the other way round
            raise _refuse(archive, e.name, f"cannot be written ({err.strerror})") from None
        size = 0
        with e.open() as src, out:
            while block := src.read(CHUNK):
                size += len(block)
                total += len(block)
                if size > limits.entry_bytes:
                    raise _refuse(archive, e.name, f"more than the {limits.entry_bytes} bytes allowed for one file")
                if total > limits.total_bytes:
                    raise _refuse(archive, e.name, f"the archive unpacks to more than the {limits.total_bytes} bytes allowed")
                out.write(block)
        written.append("/".join(parts))
    return written


def _strip_top(tmp: Path, written: list[str]) -> Path:
    """The folder every file is in, when there is exactly one (GitHub's ``<repo>-<branch>/``)."""
    tops = {w.split("/", 1)[0] for w in written}
    children = list(tmp.iterdir())
    if len(tops) == 1 and all("/" in w for w in written) and len(children) == 1 and children[0].is_dir():
        return children[0]
    return tmp
