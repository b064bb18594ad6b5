"""Progress output that works both on a terminal (a live bar) and in a log
file (one line every few seconds instead of thousands of carriage returns)."""

from __future__ import annotations

import sys

from tqdm import tqdm


class _Lines:
    """File wrapper that turns tqdm's in-place refreshes into whole lines."""

    def __init__(self, file):
        self._file = file

    def write(self, text: str) -> None:
        text = text.replace("\r", "").strip()
        if text:
            self._file.write(text + "\n")

    def flush(self) -> None:
        self._file.flush()


def progress(iterable=None, *, total=None, desc: str = "", unit: str = "it", unit_scale: bool = False, file=None, disable: bool = False):
    file = file or sys.stderr
    tty = hasattr(file, "isatty") and file.isatty()
    return tqdm(
        iterable,
        total=total,
        desc=desc,
        unit=unit,
        unit_scale=unit_scale,
        file=file if tty else _Lines(file),
        mininterval=0.2 if tty else 5.0,
        ascii=not tty,
        dynamic_ncols=tty,
        ncols=None if tty else 100,
        disable=disable,
    )
