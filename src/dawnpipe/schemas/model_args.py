"""An entry's ``model_args`` against the arguments of its model family
(``model_args.schema.yaml``): pure data, no framework imported, so every
command that loads an entry can check it."""

from __future__ import annotations

import re
from typing import Any

from dawnpipe.schemas import jsonschema_check

IMAGENET_RESNETS = {"resnet18", "resnet34", "resnet50", "resnet101", "resnet152"}


def family(entry: dict[str, Any], items: str) -> str | None:
    """The model family of an entry (None: a model name no zoo knows; the zoo names it)."""
    model, framework = entry["model"], entry["framework"]
    if items == "question":
        return f"{framework}/squad-reader" if model == "drqa" else None
    if model == "fastnet":
        return f"{framework}/fastnet"
    if framework == "pytorch" and model in IMAGENET_RESNETS:
        return "pytorch/imagenet-resnet"
    if re.fullmatch(r"resnet\d+", model):
        return f"{framework}/cifar-resnet"
    return None


def check(entry: dict[str, Any], items: str, source: str) -> None:
    """Raise a DawnpipeError naming ``source`` and ``model_args.<key>`` for the first problem."""
    schemas = jsonschema_check.package_schema("model_args")
    name = family(entry, items)
    if name is None or name not in schemas:
        return
    args = entry.get("model_args") or {}
    problem = jsonschema_check.first_problem(args, {"$defs": schemas["$defs"], **schemas[name]})
    if problem is not None:
        where, why = problem
        from dawnpipe.errors import DawnpipeError

        field = "model_args" + ("" if where == "(top level)" else f".{where}")
        raise DawnpipeError(f"{source}: field '{field}': {why} (model {entry['model']}, {entry['framework']})")
