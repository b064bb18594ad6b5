"""Verified raw files: where a task's files come from (its local directories,
``--source``, its URL), how one is checked (sha256 and length of its content,
md5 of the file), and copying or downloading each into place only once it is
verified. Shared by every data module (dawnpipe.data.*) whose raw data is a
list of files with known checksums.

A file is checked by the checksum of its *content*: for ``.gz`` files the
decompressed bytes (Debian re-compresses, so gzip bytes differ from upstream),
else the bytes themselves; ``md5`` checks the raw file where a source
publishes only that. A file that fails is deleted and fetched again once; if
it fails again, the fetch stops with both checksums.
"""

from __future__ import annotations

import gzip
import hashlib
import shutil
import urllib.parse
import zlib
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from dawnpipe.data.download import download
from dawnpipe.display import terminal_safe
from dawnpipe.errors import DawnpipeError
from dawnpipe.progress import progress

BIG_FILE = 1 << 30  # bytes above which hashing shows a progress bar


@dataclass(frozen=True)
class Check:
    ok: bool
    sha256: str | None
    md5: str | None
    size: int | None
    reason: str = ""


def content_check(path: Path, spec: dict[str, Any], name: str | None = None) -> Check:
    """Compare ``path`` with its spec (sha256 of content, length, md5 of the file).
    ``name`` is the file's real name when ``path`` is a temporary (``.part``)."""
    raw_md5 = hashlib.md5() if spec.get("md5") else None
    sha = hashlib.sha256()
    size = 0
    raw = not (name or path.name).endswith(".gz") or spec.get("raw")
    try:
        # archives of many GB (ImageNet) take minutes to hash: show progress for those
        big = path.stat().st_size > BIG_FILE
        with progress(total=path.stat().st_size if raw else None, desc=f"verify {name or path.name}", unit="B", unit_scale=True, disable=not big) as bar:
            if raw_md5 is not None:
                with open(path, "rb") as f:
                    while block := f.read(1 << 20):
                        raw_md5.update(block)
                        if raw:  # one pass gives both digests
                            sha.update(block)
                            size += len(block)
                        bar.update(len(block))
            if not raw or raw_md5 is None:
                opener = open if raw else gzip.open
                with opener(path, "rb") as f:
                    while block := f.read(1 << 20):
                        sha.update(block)
                        size += len(block)
                        bar.update(len(block))
    except (EOFError, OSError, zlib.error) as e:  # truncated or corrupted gzip stream
        return Check(False, None, raw_md5.hexdigest() if raw_md5 else None, None, f"cannot be read: {e}")
    digest, md5 = sha.hexdigest(), raw_md5.hexdigest() if raw_md5 else None
    if spec.get("md5") and md5 != spec["md5"]:
        return Check(False, digest, md5, size, f"md5 {md5}, expected {spec['md5']}")
    if spec.get("bytes") is not None and size != spec["bytes"]:
        return Check(False, digest, md5, size, f"{size} bytes of content, expected {spec['bytes']}")
    if spec.get("sha256") and digest != spec["sha256"]:
        return Check(False, digest, md5, size, f"sha256 {digest}, expected {spec['sha256']}")
    return Check(True, digest, md5, size)


def has_checksum(spec: dict[str, Any]) -> bool:
    return bool(spec.get("sha256") or spec.get("md5"))


def no_checksum_note(name: str) -> str:
    return f"no checksum is known for {name} (the task lists none); give one with --expect FILE (config: data_checksums) to have it verified"


def expected_text(spec: dict[str, Any], name: str) -> str:
    """What ``spec`` expects of a file, naming only what it gives (never "sha256 None")."""
    parts = [f"{k} {spec[k]}" for k in ("sha256", "md5") if spec.get(k)]
    if spec.get("bytes") is not None:
        parts.append(f"{spec['bytes']} bytes of content")
    if not has_checksum(spec):
        said = [f"expected {', '.join(parts)}"] if parts else []
        return "; ".join([*said, no_checksum_note(name)])
    return "expected " + ", ".join(parts)


def got_text(check: Check) -> str:
    parts = [f"{k} {v}" for k, v in (("sha256", check.sha256), ("md5", check.md5)) if v]
    return "got " + ", ".join(parts) if parts else "nothing could be read"


def is_url(source: str) -> bool:
    return urllib.parse.urlparse(source).scheme in ("http", "https", "ftp", "file")


FILE_SUFFIXES = (".gz", ".tgz", ".tar", ".zip", ".bz2", ".xz", ".json", ".txt", ".csv", "-ubyte")


def _task_file_names(spec_data: dict[str, Any]) -> set[str]:
    """Every file name the task's data section lists (files, their url_name, archives, label files)."""
    names = set(spec_data.get("files") or {})
    names |= {f["url_name"] for f in (spec_data.get("files") or {}).values() if isinstance(f, dict) and f.get("url_name")}
    if isinstance(spec_data.get("archive"), str):
        names.add(spec_data["archive"])
    for split in ("train", "test"):
        if isinstance(spec_data.get(split), dict) and spec_data[split].get("archive"):
            names.add(spec_data[split]["archive"])
    names |= set(spec_data.get("val_labels") or [])
    return names


def source_directory(source: str, spec_data: dict[str, Any]) -> str:
    """``--source`` as the directory (or URL base) holding the task's files.

    A URL whose last segment is one of the task's files (a link copied from a
    mirror's listing) means its directory; a URL naming some other file is an
    error that says so, rather than a 404 for ``<file>/<name>``. A local path
    to a file means its directory too."""
    if is_url(source):
        parts = urllib.parse.urlsplit(source)
        last = parts.path.rsplit("/", 1)[-1]
        if not last:
            return source
        names = _task_file_names(spec_data)
        parent = urllib.parse.urlunsplit((parts.scheme, parts.netloc, parts.path[: -len(last)], "", ""))
        if last in names:
            print(terminal_safe(f"fetch: --source {source} names the file {last}; taking the files from its directory {parent}"))
            return parent
        if last.lower().endswith(FILE_SUFFIXES):
            listed = ", ".join(sorted(names)) or "none listed"
            raise DawnpipeError(
                f"--source {source}: points at a file ({last}), which is not one of this task's files ({listed}); "
                f"give the URL of the directory that holds them, e.g. {parent}"
            )
        return source
    path = Path(source)
    if path.is_file():
        print(terminal_safe(f"fetch: --source {source} is a file; taking the files from its directory {path.parent}"))
        return str(path.parent)
    return source


def _sources(spec_data: dict[str, Any], source: str | None) -> tuple[list[Path], str | None]:
    """Local directories to try, then a base URL (or None)."""
    if source is None:
        dirs = [Path(d) for d in spec_data.get("local_dirs", []) if Path(d).is_dir()]
        return dirs, spec_data.get("base_url")
    if is_url(source):
        return [], source if source.endswith("/") else source + "/"
    path = Path(source)
    if not path.exists():
        raise DawnpipeError(f"--source {source}: no such file or directory")
    return [path if path.is_dir() else path.parent], None


def fetch_files(files: dict[str, dict], dest: Path, cache: Path, source: str | None, spec_data: dict) -> dict[str, Any]:
    local_dirs, base_url = _sources(spec_data, source)
    dest.mkdir(parents=True, exist_ok=True)
    record: dict[str, Any] = {}
    for name, spec in files.items():
        final = dest / name
        if final.exists():
            check = content_check(final, spec)
            if check.ok:
                print(f"fetch: {name}: already present ({'verified' if has_checksum(spec) else 'not verified: ' + no_checksum_note(name)})")
                record[name] = {"origin": "already present", "sha256": check.sha256, "bytes": check.size}
                continue
            print(f"fetch: {name}: existing file rejected ({check.reason}); fetching again")
            final.unlink()
        record[name] = _fetch_one(name, spec, final, cache, local_dirs, base_url)
    return record


def _fetch_one(name, spec, final: Path, cache: Path, local_dirs: list[Path], base_url: str | None) -> dict:
    cache.mkdir(parents=True, exist_ok=True)
    part = cache / f"{name}.part"
    problems = []
    for d in local_dirs:
        local = d / name
        if not local.is_file():
            continue
        check = content_check(local, spec)
        if check.ok:
            shutil.copyfile(local, part)
            part.replace(final)
            print(terminal_safe(f"fetch: {name}: copied from {local} ({'verified' if has_checksum(spec) else 'not verified: ' + no_checksum_note(name)})"))
            return {"origin": str(local), "sha256": check.sha256, "bytes": check.size}
        problems.append(f"{local}: {check.reason}")
        print(terminal_safe(f"fetch: {name}: local copy {local} rejected ({check.reason})"))
    if base_url is None:
        where = ", ".join(str(d) for d in local_dirs) or "no local directory"
        detail = "; ".join(problems) or f"not found in {where}"
        raise DawnpipeError(f"{name}: no verified copy ({detail}) and no URL to download it from")
    url = urllib.parse.urljoin(base_url, spec.get("url_name", name))
    for attempt in (1, 2):
        download(url, part)
        check = content_check(part, spec, name)
        if check.ok:
            part.replace(final)
            print(terminal_safe(f"fetch: {name}: downloaded from {url} ({'verified' if has_checksum(spec) else 'not verified: ' + no_checksum_note(name)})"))
            return {"origin": url, "sha256": check.sha256, "bytes": check.size}
        part.unlink()
        if attempt == 1:
            print(f"fetch: {name}: downloaded file rejected ({check.reason}); downloading again from scratch")
    what = "unreadable" if check.reason.startswith("cannot be read") else "checksum mismatch"
    raise DawnpipeError(
        f"{name}: {what} after downloading twice from {url}: {check.reason} "
        f"({got_text(check)}; {expected_text(spec, name)}); nothing was written to the destination"
    )


def fetch_listed_files(spec_data: dict, dest: Path, cache: Path, source: str | None) -> dict[str, Any]:
    """Kinds whose raw data is a fixed list of files with known checksums."""
    return fetch_files(spec_data["files"], dest, cache, source, spec_data)
