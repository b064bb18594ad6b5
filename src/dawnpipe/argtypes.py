"""Argument forms shared by stage commands.

Commands read the forms the stage table writes (``--threshold 70.0``, a flag
only when true, an option only when set) and, with the same meaning, the forms
a config value takes when written out by a template: YAML null as ``None``,
booleans as ``true``/``false``, a per-task mapping as ``--<task> VALUE`` pairs
(``--fashion-mnist 70.0``), so a hand-written command line may use either.
"""

from __future__ import annotations

import argparse
import math
from collections.abc import Callable
from typing import Any

_NULLS = {"none", "null", "~", ""}
_TRUE = {"true", "yes", "on", "1"}
_FALSE = {"false", "no", "off", "0"}


def optional_int(text: str) -> int | None:
    """A positive integer, or None/null (= not set, as the config says with null)."""
    if text.strip().lower() in _NULLS:
        return None
    return positive_int(text, or_null=True)


def positive_int(text: str, *, or_null: bool = False) -> int:
    """A whole number >= 1 (``or_null``: the message says null would do too)."""
    also = " or null" if or_null else ""
    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected a whole number{also}, got {text!r}") from None
    if value < 1:
        raise argparse.ArgumentTypeError(f"expected a number >= 1{also}, got {value}")
    return value


SEED_LIMIT = 2**32  # numpy's and Keras' seeds are below it (torch's below 2**64)


def seed(text: str) -> int:
    """A random seed: a whole number every framework's generator takes (0 .. 2**32 - 1)."""
    try:
        value = int(text)
    except ValueError:
        value = -1
    if not 0 <= value < SEED_LIMIT:
        raise argparse.ArgumentTypeError(f"expected a whole number from 0 to {SEED_LIMIT - 1}, got {text!r}")
    return value


def threshold(text: str) -> float:
    """A metric threshold: a finite number > 0 (NaN, infinity and 0 are no threshold)."""
    value = finite_float(text)
    if value <= 0:
        raise argparse.ArgumentTypeError(f"expected a threshold > 0, got {text!r}")
    return value


def seconds(text: str) -> float:
    """A duration in seconds: a finite number >= 0."""
    value = finite_float(text)
    if value < 0:
        raise argparse.ArgumentTypeError(f"expected a number of seconds >= 0, got {text!r}")
    return value


def non_negative(text: str) -> float:
    """A finite number >= 0."""
    value = finite_float(text)
    if value < 0:
        raise argparse.ArgumentTypeError(f"expected a number >= 0, got {text!r}")
    return value


def fraction(text: str) -> float:
    """A share from 0 to 0.5 (a part kept back, never most of it)."""
    value = finite_float(text)
    if not 0 <= value <= 0.5:
        raise argparse.ArgumentTypeError(f"expected a share from 0 to 0.5, got {text!r}")
    return value


def finite_float(text: str) -> float:
    try:
        value = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected a number, got {text!r}") from None
    if not math.isfinite(value):
        raise argparse.ArgumentTypeError(f"expected a finite number, got {text!r}")
    return value


def boolean(text: str) -> bool:
    word = text.strip().lower()
    if word in _TRUE:
        return True
    if word in _FALSE:
        return False
    raise argparse.ArgumentTypeError(f"expected true or false, got {text!r}")


def add_flag(parser, name: str, help: str) -> None:
    """``--name`` alone means true; ``--name true|false`` states the value."""
    parser.add_argument(name, nargs="?", const=True, default=False, type=boolean, metavar="BOOL", help=help)


def add_task_options(parser, *, what: str, dest: str, type: Callable[[str], Any], metavar: str, nargs: str | None = None) -> None:
    """``--<task> VALUE`` for every known task: a config mapping task -> value
    (what DVC's dict unpacking writes). The command uses its own task's value."""
    from dawnpipe.tasks import all_tasks

    group = parser.add_argument_group(f"{what} by task", f"the config's per-task mapping as '--<task> {metavar}' pairs; only this run's task is used")
    for name in all_tasks():
        group.add_argument(f"--{name}", dest=_task_dest(dest, name), type=type, metavar=metavar, nargs=nargs, help=f"{what} for {name}")


def task_option(args, dest: str, task: str) -> Any:
    """The ``--<task>`` value given for ``task`` (None when absent)."""
    return getattr(args, _task_dest(dest, task), None)


def _task_dest(dest: str, task: str) -> str:
    return f"{dest}__{task.replace('-', '_')}"
