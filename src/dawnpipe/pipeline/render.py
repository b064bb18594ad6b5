"""A stage of the table as each front end writes it: the command, its
inputs and outputs, its rerun values and its code.

Snakemake gets templates (``{input.data:q}``, ``{wildcards.entry}``,
``{threads}``) it fills per job itself; DVC gets every job spelt out
(dawnpipe.pipeline.dvc). Both go through the same word list, so an argument
added to a stage reaches both.
"""

from __future__ import annotations

import functools
import re
import shlex
from pathlib import Path
from typing import Any

from dawnpipe.pipeline import codedeps
from dawnpipe.pipeline.plan import Plan
from dawnpipe.pipeline.stages import In, Name, Out, Param, Stage, Threads, Work, as_words, command_words
from dawnpipe.pipeline.values import Job

STAGE_SCRIPT = "scripts/stage"  # runs `dawnpipe ARGS`, output to the terminal and the log (both tools)
_NAME = re.compile(r"\{(task|entry|seed|study)\}")


def fill(template: str, job: Job) -> str:
    """A path template of the table with the job's names."""
    return _NAME.sub(lambda m: str(job[m.group(1)]), template)


def inputs(stage: Stage, plan: Plan, job: Job, *, dvc: bool = False) -> dict[str, list[str]]:
    out = {}
    for name, spec in stage.inputs.items():
        path = spec.dvc if dvc and spec.dvc is not None else spec.path
        value = fill(path, job) if isinstance(path, str) else path(plan, job)
        out[name] = as_words(value) if value not in (None, "") else []
    return out


def outputs(stage: Stage, job: Job) -> dict[str, str]:
    return {name: fill(o.path, job) for name, o in stage.outputs.items()}


def job_values(stage: Stage, plan: Plan, job: Job) -> dict[str, Any]:
    """The value of each word of one job's command, DVC's form (no threads)."""
    ins, outs = inputs(stage, plan, job, dvc=True), outputs(stage, job)
    values: dict[str, Any] = {}
    for _, word in stage.arguments():
        if isinstance(word, In):
            values[word.name] = ins[word.name]
        elif isinstance(word, Out):
            values[word.name] = outs[word.name]
        elif isinstance(word, Param):
            values[word.name] = stage.params[word.name](plan, job)
        elif isinstance(word, Name):
            values[word.name] = str(job[word.name])
        elif isinstance(word, Work):
            values[word.name] = fill(word.path, job)
    return values  # Threads: none, DVC lets the framework use its own default (every core)


def command(stage: Stage, plan: Plan, job: Job) -> list[str]:
    """The whole argument list of one job, DVC's form (no ``--threads``)."""
    return [*plan.task_dir_words(), *command_words(stage, job_values(stage, plan, job), literal=lambda word: fill(word, job))]


def _literal(word: str) -> str:
    """A literal word of the table in a Snakemake template: braces escaped, names as wildcards."""
    escaped = word.replace("{", "{{").replace("}", "}}")
    return re.sub(r"\{\{(task|entry|seed)\}\}", r"{wildcards.\1}", escaped)


def placeholder(word: In | Out | Param | Name | Work | Threads) -> str:
    """A word of the table as the placeholder Snakemake fills per job."""
    if isinstance(word, In):
        return f"{{input.{word.name}:q}}"
    if isinstance(word, Out):
        return f"{{output.{word.name}:q}}"
    if isinstance(word, Param):
        return f"{{params.{word.name}}}"  # quoted by snakemake_param
    if isinstance(word, Name):
        return f"{{wildcards.{word.name}}}"
    if isinstance(word, Work):
        return _literal(word.path)
    return "{threads}"


def shell_template(stage: Stage, script: str, plan: Plan) -> str:
    """Snakemake's shell command of a stage: the same words as placeholders."""
    placeholders = {word.name: placeholder(word) for _, word in stage.arguments() if not isinstance(word, str)}
    parts = [_literal(shlex.quote(script)), "{log:q}", *(_literal(shlex.quote(w)) for w in plan.task_dir_words())]
    return " ".join([*parts, *command_words(stage, placeholders, literal=_literal)])


def snakemake_param(stage: Stage, name: str, plan: Plan, job: Job) -> str:
    """A Param as the shell-quoted text the template inserts."""
    value = stage.params[name](plan, job)
    return shlex.join(as_words(value)) if isinstance(value, list | tuple) else shlex.quote(str(value))


def values_hash(stage: Stage, plan: Plan, job: Job) -> str:
    """The stage's by-value rerun triggers in one value (Snakemake's params)."""
    return plan.values_hash({name: value(plan, job) for name, (value, _) in sorted(stage.values.items())})


def dvc_params(stage: Stage, plan: Plan, job: Job) -> list[tuple[str, list[str] | None]]:
    """The files a job reads by value, with their keys (``None``: every key)."""
    merged: dict[str, set[str] | None] = {}
    for _, (_, params) in sorted(stage.values.items()):
        for path, keys in params(plan, job).items():
            whole = keys is None or (path in merged and merged[path] is None)
            merged[path] = None if whole else {*(merged.get(path) or ()), *keys}
    return [(path, None if keys is None else sorted(keys)) for path, keys in merged.items()]


def job_task(plan: Plan, job: Job) -> str | None:
    """The task a job works on: its own, or its entry's."""
    return job.get("task") or (plan.task_of(job["entry"]) if "entry" in job else None)


@functools.cache
def _code(src: Path, roots: tuple[str, ...]) -> tuple[str, ...]:
    return tuple(codedeps.code_files(src, roots))


def code(stage: Stage, plan: Plan, src: Path) -> list[str]:
    """The package files a stage may run or read (the same for every job of it)."""
    from dawnpipe.cli import COMMANDS

    roots = ("dawnpipe.__main__", "dawnpipe.cli", COMMANDS[stage.command][0], *(stage.code(plan) if stage.code else ()))
    return [*_code(src, tuple(sorted(roots))), *plan.task_dir_files()]
