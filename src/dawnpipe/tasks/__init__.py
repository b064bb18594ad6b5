"""Task definitions, one YAML file per task in this directory (adding a task
is adding a file). Loaded once and cached; read-only afterwards."""

from __future__ import annotations

import functools
from dataclasses import dataclass, field
from importlib import resources
from typing import Any

import yaml

from dawnpipe.errors import DawnpipeError


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
    sensitivity_ladder: tuple[float, ...] = ()  # thresholds below the official one (SPEC.md section 4)

    @property
    def metric_max(self) -> float:
        return 100.0 if self.metric_scale == "percent" else 1.0

    def format_metric(self, value: float) -> str:
        return f"{value:.2f}%" if self.metric_scale == "percent" else f"{value:.4f}"


SCALES = ("percent", "fraction")


def _describe(value: Any) -> str:
    return "nothing" if value is None else f"{type(value).__name__} {value!r}"


class _Fields:
    """Typed look-ups in one task file; every failure names the file and the field."""

    def __init__(self, source: str):
        self.source = source

    def fail(self, field_path: str, message: str) -> DawnpipeError:
        return DawnpipeError(f"{self.source}: field '{field_path}': {message}")

    def get(self, doc: dict[str, Any], key: str, prefix: str, kind: str, *, required: bool = True, default: Any = None) -> Any:
        path = f"{prefix}{key}"
        if key not in doc or doc[key] is None:
            if required:
                raise self.fail(path, f"missing (expected {kind})")
            return default
        value = doc[key]
        ok = {
            "a string": lambda v: isinstance(v, str) and v.strip() != "",
            "a number": lambda v: isinstance(v, (int, float)) and not isinstance(v, bool),
            "a positive whole number": lambda v: isinstance(v, int) and not isinstance(v, bool) and v > 0,
            "a mapping": lambda v: isinstance(v, dict),
            "a list of strings": lambda v: isinstance(v, list) and bool(v) and all(isinstance(x, str) and x for x in v),
            "a list of numbers": lambda v: isinstance(v, list) and all(isinstance(x, (int, float)) and not isinstance(x, bool) for x in v),
        }[kind](value)
        if not ok:
            raise self.fail(path, f"expected {kind}, got {_describe(value)}")
        return value


def _from_yaml(doc: Any, source: str = "task file") -> Task:
    """A Task from one parsed task file; a missing or mistyped field is a
    DawnpipeError naming ``source`` and the field (e.g. 'metric.threshold')."""
    f = _Fields(source)
    if not isinstance(doc, dict):
        raise DawnpipeError(f"{source}: expected a mapping of task fields (name, title, submission_dir, metric, inference, data), got {_describe(doc)}")
    m = f.get(doc, "metric", "", "a mapping")
    inf = f.get(doc, "inference", "", "a mapping")
    scale = f.get(m, "scale", "metric.", "a string")
    if scale not in SCALES:
        raise f.fail("metric.scale", f"expected one of {', '.join(SCALES)}, got {scale!r}")
    threshold = float(f.get(m, "threshold", "metric.", "a number"))
    column = f.get(m, "column", "metric.", "a string")
    log_columns = tuple(f.get(m, "log_columns", "metric.", "a list of strings"))
    if column not in log_columns:
        raise f.fail("metric.log_columns", f"must include the metric column {column!r}, got {list(log_columns)}")
    data = f.get(doc, "data", "", "a mapping", required=False, default={})
    if data:
        f.get(data, "kind", "data.", "a string")
    return Task(
        name=f.get(doc, "name", "", "a string"),
        title=f.get(doc, "title", "", "a string"),
        submission_dir=f.get(doc, "submission_dir", "", "a string"),
        metric_column=column,
        metric_label=f.get(m, "label", "metric.", "a string"),
        metric_scale=scale,
        threshold=threshold,
        log_columns=log_columns,
        inference_items=f.get(inf, "items", "inference.", "a positive whole number"),
        inference_accuracy_field=f.get(inf, "accuracy_field", "inference.", "a string"),
        data=data,
        sensitivity_ladder=tuple(float(t) for t in f.get(m, "sensitivity_ladder", "metric.", "a list of numbers", required=False, default=[])),
    )


def load_task_file(path: Any) -> Task:
    """One task file (a path or an importlib Traversable): parsed and checked."""
    source = str(path)
    try:
        text = path.read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError) as e:
        raise DawnpipeError(f"{source}: cannot be read as UTF-8 text ({e})") from None
    try:
        doc = yaml.safe_load(text)
    except yaml.YAMLError as e:
        raise DawnpipeError(f"{source}: not valid YAML: {e}") from None
    return _from_yaml(doc, source)


def load_tasks(directory: Any) -> dict[str, Task]:
    """Every ``*.yaml`` task file of ``directory``, by task name."""
    tasks: dict[str, Task] = {}
    origin: dict[str, str] = {}
    for entry in sorted(directory.iterdir(), key=lambda p: p.name):
        if entry.name.endswith(".yaml"):
            task = load_task_file(entry)
            if task.name in tasks:
                raise DawnpipeError(f"{entry}: field 'name': task {task.name!r} is already defined by {origin[task.name]}")
            tasks[task.name], origin[task.name] = task, str(entry)
    return tasks


@functools.cache
def all_tasks() -> dict[str, Task]:
    return load_tasks(resources.files(__package__))


def get_task(name: str) -> Task:
    try:
        return all_tasks()[name]
    except KeyError:
        raise DawnpipeError(f"unknown task {name!r} (known: {', '.join(all_tasks())})") from None


def task_for_submission_dir(dirname: str) -> Task | None:
    for task in all_tasks().values():
        if task.submission_dir == dirname:
            return task
    return None
