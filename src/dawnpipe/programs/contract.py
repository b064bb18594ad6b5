"""The placeholders of a program entry's command (docs/programs.md).

A program's ``command`` is a list of words run without a shell; each word
may hold placeholders that dawnpipe fills in for the run:

    {data}        absolute path of the task's prepared data as the program is given it (manifest.json and its arrays)
    {torchvision} a root directory of the same items in torchvision's layout (FashionMNIST/raw/, cifar-10-batches-py/, train/ and val/)
    {npz}         one .npz file of the same items as Keras' load_data() returns them (x_train, y_train, x_test, y_test)
    {out}         an absolute, empty directory for the program's model files
    {state}       a directory that survives an interrupted run: the program's own checkpoint, to continue from
    {seed}       the run's seed
    {threshold}  the run's threshold, in the unit of the task's metric
    {device}     cpu or cuda
    {threads}    CPU threads the program may use
    {hp.NAME}    the entry's hyperparameter NAME (a number, a string or true/false)

``{{`` and ``}}`` are literal braces. The same placeholders work in the
values of ``program.env``. A placeholder the contract does not know, a
hyperparameter the entry does not have, a list or mapping used as a word,
or an unmatched brace is one error naming the entry file and the field
(``program.command[3]``), when the configuration is read.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from typing import Any

from dawnpipe.errors import DawnpipeError

CONTRACT = 2  # the newest version of the program contract (docs/programs.md); 1 is still followed
CONTRACTS = (1, 2)
PLACEHOLDERS = ("data", "torchvision", "npz", "out", "state", "seed", "threshold", "device", "threads")
DATA_LAYOUTS = ("torchvision", "npz")  # placeholders whose data dawnpipe writes only when the command names them
HP_PREFIX = "hp."
_TOKEN = re.compile(r"\{\{|\}\}|\{([^{}]*)\}|[{}]")


def _known() -> str:
    return ", ".join(f"{{{p}}}" for p in (*PLACEHOLDERS, "hp.NAME"))


def format_value(value: Any) -> str:
    """A hyperparameter as a word: numbers as Python writes them, booleans as YAML does."""
    if isinstance(value, bool):
        return "true" if value else "false"
    return str(value)


def _substitute(word: str, lookup, field: str) -> str:
    def one(m: re.Match) -> str:
        token = m.group(0)
        if token in ("{{", "}}"):
            return token[0]
        name = m.group(1)
        if name is None:
            raise DawnpipeError(f"field '{field}': unmatched {token!r} in {word!r} (write {token * 2} for a literal one)")
        return lookup(name)

    return _TOKEN.sub(one, word)


def _hp_value(hp: Mapping[str, Any], name: str, field: str) -> str:
    key = name[len(HP_PREFIX) :]
    if key not in hp:
        have = ", ".join(sorted(hp)) or "none"
        raise DawnpipeError(f"field '{field}': {{{name}}} names no hyperparameter of the entry (it has: {have})")
    value = hp[key]
    if isinstance(value, dict | list) or value is None:
        raise DawnpipeError(
            f"field '{field}': {{{name}}} is {type(value).__name__ if value is not None else 'null'}; only a number, a string or true/false fills a word"
        )
    return format_value(value)


def fill_word(word: str, values: Mapping[str, str], hp: Mapping[str, Any], field: str) -> str:
    """``word`` with its placeholders replaced: ``values`` for the contract's, ``hp`` for ``{hp.NAME}``."""

    def lookup(name: str) -> str:
        if name.startswith(HP_PREFIX):
            return _hp_value(hp, name, field)
        if name in values:
            return str(values[name])
        raise DawnpipeError(f"field '{field}': unknown placeholder {{{name}}} in {word!r} (known: {_known()})")

    return _substitute(word, lookup, field)


def check(program: Mapping[str, Any], hp: Mapping[str, Any], source: str) -> None:
    """Every placeholder of the command and of env is known and fillable; else one error naming ``source`` and the field."""
    stand_ins = {p: p for p in PLACEHOLDERS}
    words = [(f"program.command[{i}]", w) for i, w in enumerate(program["command"])]
    words += [(f"program.env.{k}", v) for k, v in program.get("env", {}).items()]
    for field, word in words:
        try:
            fill_word(word, stand_ins, hp, field)
        except DawnpipeError as e:
            raise DawnpipeError(f"{source}: {e}") from None


def fill(program: Mapping[str, Any], values: Mapping[str, str], hp: Mapping[str, Any]) -> tuple[list[str], dict[str, str]]:
    """(the command's words, the extra environment) of one run."""
    command = [fill_word(w, values, hp, f"program.command[{i}]") for i, w in enumerate(program["command"])]
    env = {k: fill_word(v, values, hp, f"program.env.{k}") for k, v in program.get("env", {}).items()}
    return command, env


def check_layouts(program: Mapping[str, Any], task: str, source: str) -> None:
    """A data layout the command names must exist for the entry's task (dawnpipe.data.layouts); else one error naming the field."""
    from dawnpipe.programs.data_layouts import layout_refusal

    words = [(f"program.command[{i}]", w) for i, w in enumerate(program["command"])]
    words += [(f"program.env.{k}", v) for k, v in program.get("env", {}).items()]
    for field, word in words:
        for kind in DATA_LAYOUTS:
            if "{" + kind + "}" in word:
                reason = layout_refusal(kind, task)
                if reason is not None:
                    raise DawnpipeError(f"{source}: field '{field}': {reason}")


def named_placeholders(program: Mapping[str, Any]) -> set[str]:
    """The contract's placeholders the command and env use (not {hp.NAME})."""
    words = [*program["command"], *program.get("env", {}).values()]
    return {m.group(1) for w in words for m in _TOKEN.finditer(w) if m.group(1) and not m.group(1).startswith(HP_PREFIX)}


def program_name(program: Mapping[str, Any]) -> str:
    """How the leaderboard's model column names a program: its ``name``, else
    the first word of its command that looks like a file (``train.py``), else the command's first word."""
    if program.get("name"):
        return str(program["name"])
    for word in program["command"]:
        if "{" not in word and re.search(r"\.(py|sh|jl|R|lua)$", word):
            return word.rsplit("/", 1)[-1]
    return str(program["command"][0]).rsplit("/", 1)[-1]
