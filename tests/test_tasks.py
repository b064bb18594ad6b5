"""Task files (src/dawnpipe/tasks/*.yaml): a malformed one is named with the
field at fault, in one line, never a traceback."""

from __future__ import annotations

import os
import shutil
from pathlib import Path

import pytest
import yaml
from conftest import ROOT, run_cli, tool_env

from dawnpipe.errors import DawnpipeError
from dawnpipe.tasks import all_tasks, load_task_file, load_tasks

GOOD = yaml.safe_load((ROOT / "src" / "dawnpipe" / "tasks" / "cifar10.yaml").read_text())


def _write(tmp_path: Path, doc, name: str = "broken.yaml") -> Path:
    path = tmp_path / name
    path.write_text(doc if isinstance(doc, str) else yaml.safe_dump(doc))
    return path


def _without(path: str) -> dict:
    doc = yaml.safe_load(yaml.safe_dump(GOOD))
    *parents, key = path.split(".")
    target = doc
    for p in parents:
        target = target[p]
    del target[key]
    return doc


def _with(path: str, value) -> dict:
    doc = yaml.safe_load(yaml.safe_dump(GOOD))
    *parents, key = path.split(".")
    target = doc
    for p in parents:
        target = target[p]
    target[key] = value
    return doc


def test_the_shipped_task_files_load():
    assert set(all_tasks()) == {"cifar10", "fashion-mnist", "imagenet", "squad"}
    assert all_tasks()["imagenet"].metric_column == "top5Accuracy" and all_tasks()["squad"].metric_scale == "fraction"


@pytest.mark.parametrize(
    "field",
    [
        "name",
        "title",
        "submission_dir",
        "metric",
        "inference",
        "metric.threshold",
        "metric.column",
        "metric.scale",
        "metric.log_columns",
        "inference.items",
        "inference.accuracy_field",
        "data",
        "data.module",
    ],
)
def test_a_missing_field_is_named_with_its_file(tmp_path, field):
    path = _write(tmp_path, _without(field))
    with pytest.raises(DawnpipeError) as e:
        load_task_file(path)
    assert str(e.value).startswith(f"{path}: field '{field}': missing")


@pytest.mark.parametrize(
    "field, value, says",
    [
        ("metric.threshold", "ninety-four", "expected a number, got str 'ninety-four'"),
        ("metric.threshold", True, "expected a number, got bool True"),
        ("metric.threshold", float("nan"), "not a finite number (NaN or infinity)"),
        ("metric.threshold", -1, "expected a number > 0, got int -1"),
        ("metric", [1, 2], "expected a mapping, got list [1, 2]"),
        ("metric.log_columns", "top1Accuracy", "expected a list, got str 'top1Accuracy'"),
        ("metric.scale", "percentage", "expected one of percent, fraction, got str 'percentage'"),
        ("metric.sensitivity_ladder.1", [90, "91"], "expected a number, got str '91'"),
        ("metric.log_columns", ["top5Accuracy"], "must include the metric column 'top1Accuracy'"),
        ("inference.items", 10000.5, "expected a whole number, got float 10000.5"),
        ("inference.items", 0, "expected a number >= 1, got int 0"),
        ("name", 12, "expected a string, got int 12"),
        ("data", "cifar", "expected a mapping, got str 'cifar'"),
        ("data.module", None, "expected a string, got null"),
        ("unknown", 1, "unknown key 'unknown'"),
    ],
)
def test_a_field_of_the_wrong_type_is_named_with_its_file(tmp_path, field, value, says):
    where = field.removesuffix(".1")  # a list's item: the field is set whole, the message names the item
    path = _write(tmp_path, _with(where, value))
    with pytest.raises(DawnpipeError) as e:
        load_task_file(path)
    shown = "(top level)" if field == "unknown" else field
    assert str(e.value).startswith(f"{path}: field '{shown}': {says}")


def test_not_yaml_or_not_a_mapping_is_named(tmp_path):
    with pytest.raises(DawnpipeError, match=r"broken\.yaml: not valid YAML"):
        load_task_file(_write(tmp_path, "name: [unclosed\n"))
    with pytest.raises(DawnpipeError, match=r"list\.yaml: expected a mapping of task fields"):
        load_task_file(_write(tmp_path, "- a\n- b\n", "list.yaml"))
    with pytest.raises(DawnpipeError, match=r"empty\.yaml: expected a mapping of task fields .* got nothing"):
        load_task_file(_write(tmp_path, "", "empty.yaml"))


def test_two_files_defining_one_task_are_named(tmp_path):
    _write(tmp_path, GOOD, "a.yaml")
    _write(tmp_path, GOOD, "b.yaml")
    with pytest.raises(DawnpipeError, match=r"b\.yaml: field 'name': task 'cifar10' is already defined by .*a\.yaml"):
        load_tasks(tmp_path)


def test_the_cli_names_a_malformed_task_file_without_a_traceback(tmp_path):
    """A copy of the package with a broken task file beside the real ones."""
    src = tmp_path / "src"
    shutil.copytree(ROOT / "src" / "dawnpipe", src / "dawnpipe", ignore=shutil.ignore_patterns("__pycache__"))
    bad = src / "dawnpipe" / "tasks" / "broken.yaml"
    bad.write_text(yaml.safe_dump(_with("metric.threshold", "high")))
    env = tool_env()
    env["PYTHONPATH"] = os.pathsep.join([str(src), env.get("PYTHONPATH", "")]).rstrip(os.pathsep)
    proc = run_cli("fetch", "fashion-mnist", "--dest", str(tmp_path / "raw"), env=env)
    assert proc.returncode == 1 and proc.stderr.splitlines() == [
        f"dawnpipe fetch: error: {bad}: field 'metric.threshold': expected a number, got str 'high'"
    ], proc.stderr
    assert not (tmp_path / "raw").exists()
