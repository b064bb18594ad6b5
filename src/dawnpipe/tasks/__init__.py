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


def _from_yaml(doc: dict[str, Any]) -> Task:
    m, inf = doc["metric"], doc["inference"]
    return Task(
        name=doc["name"],
        title=doc["title"],
        submission_dir=doc["submission_dir"],
        metric_column=m["column"],
        metric_label=m["label"],
        metric_scale=m["scale"],
        threshold=float(m["threshold"]),
        log_columns=tuple(m["log_columns"]),
        inference_items=int(inf["items"]),
        inference_accuracy_field=inf["accuracy_field"],
        data=doc.get("data") or {},
        sensitivity_ladder=tuple(float(t) for t in m.get("sensitivity_ladder") or ()),
    )


@functools.cache
def all_tasks() -> dict[str, Task]:
    tasks = {}
    for entry in sorted(resources.files(__package__).iterdir(), key=lambda p: p.name):
        if entry.name.endswith(".yaml"):
            task = _from_yaml(yaml.safe_load(entry.read_text(encoding="utf-8")))
            tasks[task.name] = task
    return tasks


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
