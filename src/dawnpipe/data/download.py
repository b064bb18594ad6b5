"""Resumable HTTP(S) downloads with a progress bar.

A partial download is kept as ``<name>.part`` in a cache directory that no
pipeline stage treats as output; the next attempt asks the server for the
remaining bytes (``Range``) and appends them. A server that ignores ``Range``
(status 200) restarts the file from zero.
"""

from __future__ import annotations

import time
import urllib.error
import urllib.request
from pathlib import Path

from dawnpipe.errors import DawnpipeError
from dawnpipe.progress import progress

CHUNK = 1 << 16


def download(url: str, part: Path, *, retries: int = 3, timeout: float = 60.0) -> Path:
    """Download ``url`` into ``part`` (resuming what is already there)."""
    part.parent.mkdir(parents=True, exist_ok=True)
    last_error: Exception | None = None
    for attempt in range(1, retries + 1):
        try:
            _download_once(url, part, timeout)
            return part
        except urllib.error.HTTPError as e:
            if e.code == 416:  # range not satisfiable: what we have is not a prefix; start over
                part.unlink(missing_ok=True)
            elif 400 <= e.code < 500:
                raise DawnpipeError(f"{url}: HTTP {e.code} {e.reason}") from None
            last_error = e
        except (urllib.error.URLError, TimeoutError, ConnectionError, OSError) as e:
            last_error = e
        if attempt < retries:
            time.sleep(min(2.0**attempt, 10.0))
    reason = getattr(last_error, "reason", None) or last_error
    raise DawnpipeError(
        f"{url}: download failed after {retries} attempts ({reason}); {part} keeps the {part.stat().st_size if part.exists() else 0} bytes received, the next run resumes from there"
    )


def _download_once(url: str, part: Path, timeout: float) -> None:
    have = part.stat().st_size if part.exists() else 0
    headers = {"User-Agent": "dawnpipe"}
    if have:
        headers["Range"] = f"bytes={have}-"
    req = urllib.request.Request(url, headers=headers)
    with urllib.request.urlopen(req, timeout=timeout) as resp:
        if have and resp.status == 206:
            start = _content_range_start(resp.headers.get("Content-Range"))
            if start != have:
                raise urllib.error.HTTPError(url, 416, "unexpected Content-Range", resp.headers, None)
            mode = "ab"
        else:
            have, mode = 0, "wb"
        length = resp.headers.get("Content-Length")
        total = have + int(length) if length and length.isdigit() else None
        with open(part, mode) as out, progress(total=total, desc=f"fetch {part.name.removesuffix('.part')}", unit="B", unit_scale=True) as bar:
            bar.update(have)
            while chunk := resp.read(CHUNK):
                out.write(chunk)
                bar.update(len(chunk))
        if total is not None and part.stat().st_size != total:
            raise ConnectionError(f"connection closed after {part.stat().st_size} of {total} bytes")


def _content_range_start(value: str | None) -> int | None:
    # "bytes 100-199/200"
    if not value or not value.startswith("bytes "):
        return None
    try:
        return int(value[6:].split("-", 1)[0])
    except ValueError:
        return None
