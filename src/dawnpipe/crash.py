"""Crash reports: the traceback of a bug in dawnpipe goes to a file, and the
user sees one line naming it. Writing that file may fail too (a full or
read-only temporary directory); the line then says so, and still no
traceback reaches the terminal."""

from __future__ import annotations

import os
import sys
import tempfile
import traceback


def crash_report(command: str) -> str:
    """Write the current exception's traceback to a file; the words that name
    it for the error line ("with /tmp/dawnpipe-train-crash-....txt"), or why
    there is none."""
    try:
        fd, path = tempfile.mkstemp(prefix=f"dawnpipe-{command}-crash-", suffix=".txt")
        with os.fdopen(fd, "w", encoding="utf-8", errors="backslashreplace") as f:
            f.write(f"dawnpipe {command} {' '.join(sys.argv[2:])}\n\n")
            traceback.print_exc(file=f)
    except OSError as e:
        return f"no crash report: writing one in {tempfile.gettempdir()} failed ({e.strerror or e})"
    return path
