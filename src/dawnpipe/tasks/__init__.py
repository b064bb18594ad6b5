"""The task registry: one YAML file per task (this package's ``*.yaml``, and
those of the directories of ``DAWNPIPE_TASK_DIRS``), each naming the data
module that fetches and prepares its data (dawnpipe.tasks.kind). A new task
is one task file plus one data module; nothing else names it.

Extra task directories come from the config's ``task_dirs`` (the pipeline
passes them to every command as ``dawnpipe --task-dir DIR``) or from the
environment variable ``DAWNPIPE_TASK_DIRS`` (``os.pathsep``-separated). A
data module found there (``<dir>/<module>.py``) is code the pipeline runs:
it is part of your configuration, like an entry, and never comes from a
submission. Task files are checked against ``schemas/task.schema.yaml``; a
problem is one line naming the file and the field.
"""

from __future__ import annotations

import functools
import hashlib
import importlib
import importlib.util
import os
import sys
from dataclasses import dataclass, field
from importlib import resources
from pathlib import Path
from typing import Any

from dawnpipe.errors import DawnpipeError
from dawnpipe.fileio import load_yaml_text, read_yaml
from dawnpipe.schemas import jsonschema_check

ENV = "DAWNPIPE_TASK_DIRS"


@dataclass(frozen=True)
class Task:
    name: str
    title: str
    submission_dir: str
    metric_column: str
    metric_label: str
    metric_scale: str  # "percent" or "fraction"
    threshold: float
    log_columns: tuple[str, ...]
    inference_items: int
    inference_accuracy_field: str
    data: dict[str, Any] = field(default_factory=dict, compare=False, hash=False)
    sensitivity_ladder: tuple[float, ...] = ()  # thresholds below the official one (docs/rules.md#analysis-metrics)
    order: int = 100  # place on the leaderboard
    source: str = ""  # the task file

    @property
    def metric_max(self) -> float:
        return 100.0 if self.metric_scale == "percent" else 1.0

    def format_metric(self, value: float) -> str:
        return f"{value:.2f}%" if self.metric_scale == "percent" else f"{value:.4f}"

    @property
    def data_kind(self):
        """The data module's DataKind (imported on first use: Pillow & co. only for the tasks that need them)."""
        return _data_kind(self.data["module"], str(Path(self.source).parent) if self.source else "")


def _from_yaml(doc: Any, source: str = "task file") -> Task:
    if not isinstance(doc, dict):
        raise DawnpipeError(
            f"{source}: expected a mapping of task fields (name, title, submission_dir, metric, inference, data), got {jsonschema_check.describe(doc) if doc is not None else 'nothing'}"
        )
    jsonschema_check.check(doc, jsonschema_check.package_schema("task"), source)
    m, inf = doc["metric"], doc["inference"]
    if m["column"] not in m["log_columns"]:
        raise DawnpipeError(f"{source}: field 'metric.log_columns': must include the metric column {m['column']!r}, got {m['log_columns']}")
    return Task(
        name=doc["name"],
        title=doc["title"],
        submission_dir=doc["submission_dir"],
        metric_column=m["column"],
        metric_label=m["label"],
        metric_scale=m["scale"],
        threshold=float(m["threshold"]),
        log_columns=tuple(m["log_columns"]),
        inference_items=inf["items"],
        inference_accuracy_field=inf["accuracy_field"],
        data=doc["data"],
        sensitivity_ladder=tuple(float(t) for t in m.get("sensitivity_ladder", [])),
        order=int(doc.get("order", 100)),
        source=source,
    )


def load_task_file(path: Any) -> Task:
    """One task file (a path or an importlib Traversable): parsed and checked."""
    source = str(path)
    if isinstance(path, Path):  # a task directory's file: read bounded
        return _from_yaml(read_yaml(path), source)
    try:
        text = path.read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError) as e:
        raise DawnpipeError(f"{source}: cannot be read as UTF-8 text ({e})") from None
    return _from_yaml(load_yaml_text(text, source), source)


def load_tasks(directory: Any, into: dict[str, Task] | None = None) -> dict[str, Task]:
    """Every ``*.yaml`` task file of ``directory``, by task name, added to ``into``."""
    tasks: dict[str, Task] = {} if into is None else into
    for entry in sorted(directory.iterdir(), key=lambda p: p.name):
        if entry.name.endswith(".yaml"):
            task = load_task_file(entry)
            if task.name in tasks:
                raise DawnpipeError(f"{entry}: field 'name': task {task.name!r} is already defined by {tasks[task.name].source}")
            tasks[task.name] = task
    return tasks


def task_dirs() -> list[Path]:
    return [Path(d) for d in os.environ.get(ENV, "").split(os.pathsep) if d]


def use_task_dirs(paths: list[str | Path]) -> None:
    """Add directories of task files for this process and every command it
    starts (the environment variable), and read the tasks again."""
    known = [str(p) for p in task_dirs()]
    os.environ[ENV] = os.pathsep.join(dict.fromkeys([*known, *(str(Path(p)) for p in paths)]))
    all_tasks.cache_clear()


@functools.cache
def all_tasks() -> dict[str, Task]:
    """Every task, by name (in name order)."""
    tasks = load_tasks(resources.files(__package__))
    for directory in task_dirs():
        if not directory.is_dir():
            raise DawnpipeError(f"{directory}: no such task directory ({ENV}, or task_dirs in the config)")
        load_tasks(directory, tasks)
    return dict(sorted(tasks.items()))


def leaderboard_order() -> list[str]:
    """Task names in the order of their tables on the leaderboard (each task file's ``order``)."""
    return [t.name for t in sorted(all_tasks().values(), key=lambda t: (t.order, t.name))]


def get_task(name: str) -> Task:
    try:
        return all_tasks()[name]
    except KeyError:
        raise DawnpipeError(f"unknown task {name!r} (known: {', '.join(all_tasks())})") from None


@functools.cache
def _data_kind(module: str, directory: str):
    """The KIND of a data module: a file ``<directory>/<module>.py`` of a task
    directory, else an importable module (the package's own: dawnpipe.data.*)."""
    local = Path(directory) / f"{module}.py" if directory else None
    if local is not None and local.is_file():
        name = f"dawnpipe_task_data_{hashlib.sha256(str(local.resolve()).encode()).hexdigest()[:12]}_{module}"
        spec = importlib.util.spec_from_file_location(name, local)
        loaded = importlib.util.module_from_spec(spec)
        sys.modules[name] = loaded
        spec.loader.exec_module(loaded)
    else:
        try:
            loaded = importlib.import_module(module)
        except ModuleNotFoundError as e:
            raise DawnpipeError(f"data module {module!r}: not found ({e}); a task directory's module sits beside its task file") from None
    kind = getattr(loaded, "KIND", None)
    from dawnpipe.tasks.kind import ITEM_KINDS, DataKind

    if not isinstance(kind, DataKind):
        raise DawnpipeError(f"data module {module!r} ({getattr(loaded, '__file__', '?')}): no KIND = DataKind(...) (see dawnpipe.tasks.kind)")
    if kind.items not in ITEM_KINDS:
        raise DawnpipeError(f"data module {module!r}: KIND.items {kind.items!r} is not one of {', '.join(ITEM_KINDS)}")
    return kind
