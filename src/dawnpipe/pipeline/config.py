"""The run configuration, in layers: each file states only what it changes.

    config = schema defaults < config/config.yaml < --configfile A < B ... < --config key=value

``config/config.yaml`` is the default run; a config given on the command line
(``config/test.yaml``, ``config/benchmark.yaml``) is laid over it. How a layer
changes a key is read off the schema (workflow/schemas/config.schema.yaml), so
there is one rule and no list to keep:

- a *group of settings* (a mapping with fixed keys: ``inference``,
  ``telemetry``, ``submission_author``) merges key by key: a layer that sets
  ``inference.warmup`` keeps the default's backends;
- a *table keyed by task* (``thresholds``, ``data_sources``, ...) and every
  list are replaced whole: ``thresholds: {}`` means the official thresholds,
  whatever the default's demo threshold was. (Snakemake's own merge of
  --configfile is key by key everywhere, which is why the Snakefile does not
  use it.)

Every layer is validated on its own (a misspelt key, a boolean where a number
belongs, a NaN) so the error names the file that said it; the result is then
validated whole. Snakemake (workflow/rules/common.smk) and the DVC generator
(dawnpipe.pipeline.dvc) both call ``resolve``.
"""

from __future__ import annotations

import copy
import functools
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import yaml

from dawnpipe.errors import DawnpipeError
from dawnpipe.fileio import parse_yaml, read_yaml
from dawnpipe.schemas import jsonschema_check
from dawnpipe.schemas.jsonschema_check import describe

SCHEMA = Path("workflow/schemas/config.schema.yaml")
DEFAULT = Path("config/config.yaml")


@dataclass(frozen=True)
class Config:
    """A resolved configuration and where each top-level key was last set."""

    values: dict[str, Any]
    files: tuple[str, ...]  # the layers read, in order (the default first)
    origin: dict[str, str] = field(default_factory=dict)  # key -> the file (or "--config") that set it
    root: Path = Path(".")

    def __getitem__(self, key: str) -> Any:
        return self.values[key]

    def where(self, key: str) -> str:
        """The file that set ``key`` (for messages), or the schema's default."""
        return self.origin.get(key, f"{SCHEMA} (default)")


@functools.cache
def load_schema(root: Path) -> dict[str, Any]:
    return parse_yaml((root / SCHEMA).read_text(encoding="utf-8"))


def defaults(schema: Mapping[str, Any]) -> dict[str, Any]:
    """The schema's default for every key, groups filled in from their own keys' defaults."""
    out = {}
    for key, sub in schema.get("properties", {}).items():
        if "properties" in sub:
            out[key] = {**copy.deepcopy(sub.get("default", {})), **defaults(sub)}
        elif "default" in sub:
            out[key] = copy.deepcopy(sub["default"])
    return out


def merge(base: Mapping[str, Any], layer: Mapping[str, Any], schema: Mapping[str, Any]) -> dict[str, Any]:
    """``layer`` over ``base``: groups of settings key by key, everything else replaced."""
    out = dict(base)
    props = schema.get("properties", {})
    for key, value in layer.items():
        sub = props.get(key, {})
        if "properties" in sub and isinstance(value, Mapping) and isinstance(out.get(key), Mapping):
            out[key] = merge(out[key], value, sub)
        else:
            out[key] = copy.deepcopy(value)
    return out


def check(doc: Any, schema: Mapping[str, Any], source: str, *, partial: bool) -> None:
    """Raise a DawnpipeError naming ``source`` and the field of the first problem;
    ``partial``: a layer, which need not hold the required keys."""
    if not isinstance(doc, Mapping):
        raise DawnpipeError(f"{source}: expected a mapping of config keys, got {describe(doc)}")
    jsonschema_check.check(doc, {k: v for k, v in schema.items() if k != "required"} if partial else schema, source)


def read_layer(path: Path) -> dict[str, Any]:
    try:
        doc = read_yaml(path)
    except FileNotFoundError:
        raise DawnpipeError(f"{path}: no such config file") from None
    return {} if doc is None else doc


def resolve(config_files: Iterable[str | Path] = (), overrides: Mapping[str, Any] | None = None, *, root: Path = Path(".")) -> Config:
    """The configuration of a run: the default file, then ``config_files``, then
    ``overrides`` (Snakemake's --config), each checked on its own."""
    schema = load_schema(root)
    values = defaults(schema)
    files = [DEFAULT] + [Path(f) for f in config_files if Path(f) != DEFAULT]
    origin: dict[str, str] = {}
    for path in files:
        layer = read_layer(root / path if not Path(path).is_absolute() else Path(path))
        check(layer, schema, str(path), partial=True)
        values = merge(values, layer, schema)
        origin.update(dict.fromkeys(layer, str(path)))
    if overrides:
        check(dict(overrides), schema, "--config", partial=True)
        values = merge(values, overrides, schema)
        origin.update(dict.fromkeys(overrides, "--config"))
    check(values, schema, " + ".join(map(str, files)), partial=False)
    return Config(values, tuple(map(str, files)), origin, root)


def typed_cli_values(overrides: Mapping[str, Any]) -> dict[str, Any]:
    """Snakemake's ``--config key=[3]`` reads the scalars inside a list or a
    mapping as strings (YAML's base loader); read them as YAML does, so
    ``seeds=[3]`` means the number 3 as it would in a config file."""

    def typed(value: Any, inside: bool) -> Any:
        if isinstance(value, Mapping):
            return {k: typed(v, True) for k, v in value.items()}
        if isinstance(value, list):
            return [typed(v, True) for v in value]
        if inside and isinstance(value, str):
            try:
                parsed = yaml.safe_load(value)
            except yaml.YAMLError:
                return value
            return parsed if isinstance(parsed, int | float | bool) or parsed is None else value
        return value

    return {k: typed(v, False) for k, v in overrides.items()}


def check_task_keys(config: Config, known: Iterable[str]) -> None:
    """Per-task tables may name only known tasks: a misspelt task under
    ``thresholds`` would otherwise be ignored and the official threshold used
    without a word."""
    known = set(known)
    for key, sub in load_schema(config.root)["properties"].items():
        if sub.get("x-keyed-by") != "task" or not isinstance(config.values.get(key), Mapping):
            continue
        for task in config.values[key]:
            if task not in known:
                raise DawnpipeError(f"{config.where(key)}: field '{key}.{task}': unknown task {task!r} (known: {', '.join(sorted(known))})")
