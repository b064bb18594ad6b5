"""Benchmark entries (config/entries/*.yaml) and the run configuration hash.

An entry is validated against ``schemas/entry.schema.yaml`` with the schema's
defaults filled in, so every consumer (Snakemake, DVC, the trainers, the
report) sees the same complete recipe.
"""

from __future__ import annotations

import copy
import hashlib
import json
import os
from pathlib import Path
from typing import Any

from dawnpipe.errors import DawnpipeError
from dawnpipe.fileio import read_yaml
from dawnpipe.schemas import jsonschema_check, model_args


def entry_schema() -> dict[str, Any]:
    return jsonschema_check.package_schema("entry")


def fill_defaults(instance: Any, schema: dict[str, Any]) -> Any:
    """Fill in ``default`` values of object properties, recursively."""
    if not isinstance(instance, dict) or schema.get("type") != "object":
        return instance
    for key, sub in schema.get("properties", {}).items():
        if key not in instance and "default" in sub:
            instance[key] = copy.deepcopy(sub["default"])
        if key in instance:
            instance[key] = fill_defaults(instance[key], sub)
    return instance


def validate_entry(doc: Any, source: str) -> dict[str, Any]:
    """The entry with the schema's defaults filled in; the first problem is one
    DawnpipeError naming ``source`` and the field. A program entry (one with a
    ``program`` section) is checked against its own schema (validate_program)."""
    if not isinstance(doc, dict):
        raise DawnpipeError(f"{source}: an entry must be a mapping, got {type(doc).__name__}")
    if "program" in doc:
        return validate_program(doc, source)
    schema = entry_schema()
    jsonschema_check.check(doc, schema, source)
    from dawnpipe.tasks import all_tasks  # tasks are data files: the schema cannot list them

    if doc["task"] not in all_tasks():
        raise DawnpipeError(f"{source}: field 'task': unknown task {doc['task']!r} (known: {', '.join(all_tasks())})")
    entry = fill_defaults(copy.deepcopy(doc), schema)
    model_args.check(entry, all_tasks()[entry["task"]].data_kind.items, source)
    return entry


# What a program entry is given, so that every stage reads it like a zoo
# entry: the framework every program has, and one process (a program that
# starts processes of its own does so inside its command).
PROGRAM_FRAMEWORK = "program"
_ZOO_ONLY = ("framework", "model", "model_args", "distributed", "held_out", "new_test")


def is_program(entry: dict[str, Any]) -> bool:
    return entry.get("framework") == PROGRAM_FRAMEWORK or "program" in entry


def validate_program(doc: dict[str, Any], source: str) -> dict[str, Any]:
    """A program entry, checked (schemas/program_entry.schema.yaml, its
    placeholders) and filled in: defaults, ``framework: program``, ``model``
    (the program's name), no model_args, one process."""
    from dawnpipe.programs import contract, weights

    zoo = [k for k in _ZOO_ONLY if k in doc]
    if zoo:
        raise DawnpipeError(
            f"{source}: field '{zoo[0]}': a program entry has no {zoo[0]} (the program is the recipe: docs/programs.md); "
            "write either `program:` or `framework:` and `model:`"
        )
    schema = jsonschema_check.package_schema("program_entry")
    jsonschema_check.check(doc, schema, source)
    from dawnpipe.tasks import all_tasks

    tasks = all_tasks()
    if doc["task"] not in tasks:
        raise DawnpipeError(f"{source}: field 'task': unknown task {doc['task']!r} (known: {', '.join(tasks)})")
    items = tasks[doc["task"]].data_kind.items
    if items != "image":
        raise DawnpipeError(f"{source}: field 'task': a program entry hands over an image classifier (docs/programs.md); task {doc['task']} has {items} items")
    entry = fill_defaults(copy.deepcopy(doc), schema)
    contract.check(entry["program"], entry["hyperparameters"], source)
    contract.check_layouts(entry["program"], entry["task"], source)
    weights.check_entry(entry["program"], source)
    entry["framework"] = PROGRAM_FRAMEWORK
    entry["model"] = contract.program_name(entry["program"])
    entry["model_args"] = {}
    entry["distributed"] = {"nodes": 1, "processes_per_node": 1}
    return entry


def precision_of(entry: dict[str, Any]) -> str:
    """The arithmetic an entry trains in: its hyperparameter, or what a program's author states."""
    return entry["program"]["precision"] if is_program(entry) else entry["hyperparameters"]["precision"]


def read_entry_doc(path: str | Path) -> dict[str, Any]:
    """An entry file's mapping as written (no defaults filled in, no id), read
    bounded and checked: for a tool that writes a changed copy of it."""
    doc = read_yaml(Path(path))
    validate_entry(doc, str(path))
    return doc


def load_entry(path: str | Path) -> dict[str, Any]:
    path = Path(path)
    entry = validate_entry(read_yaml(path), str(path))
    entry["id"] = path.stem
    program = entry.get("program")
    if program is not None and not program.get("source") and program["workdir"].startswith(("./", "../")):
        # a program kept beside its entry file: its workdir, from there, as a path from the project root (where the pipeline runs)
        program["workdir"] = os.path.relpath(os.path.normpath(os.path.join(path.parent, program["workdir"])))
    return entry


def config_hash(obj: Any) -> str:
    """sha256 of the canonical JSON of ``obj``: equal for equal content,
    whatever the comments, key order or number formatting of the YAML."""
    text = json.dumps(obj, sort_keys=True, separators=(",", ":"), ensure_ascii=True, default=str)
    return hashlib.sha256(text.encode("utf-8")).hexdigest()


PROGRAM_RULES = {"startup_allowance_cpu_seconds": 15.0, "evaluation_factor": 2.0, "held_back_fraction": 0.2}  # config key `programs`


def run_settings(
    entry: dict[str, Any],
    *,
    seed: int,
    threshold: float,
    official_threshold: float,
    train_limit: int | None,
    test_limit: int | None,
    stop_at_threshold: bool,
    programs: dict[str, float] | None = None,
) -> dict[str, Any]:
    """Everything that decides a training run's result, in one dict (hashed into run.json); a program
    entry's also holds the configuration's ``programs`` rules (clock allowances, test items kept back)."""
    extra = {"programs": {k: float(v) for k, v in {**PROGRAM_RULES, **(programs or {})}.items()}} if is_program(entry) else {}
    return {
        "entry": entry,
        "seed": int(seed),
        "threshold": float(threshold),
        "official_threshold": float(official_threshold),
        "demo_threshold": float(threshold) != float(official_threshold),
        "train_limit": train_limit,
        "test_limit": test_limit,
        "stop_at_threshold": bool(stop_at_threshold),
        **extra,
    }
