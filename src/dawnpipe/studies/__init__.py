"""Studies: the DAWNBench papers' experiments as declared files
(``config/studies/<name>.yaml``, checked by ``schemas/study.schema.yaml``).

A study names a base entry and what to vary. Its variants are entries
derived from the base by dotted-field overrides, with readable, stable ids:

    one-at-a-time   <base>+<factor>=<level>            each level of each factor alone
    factorial       <base>+<f1>=<l1>+<f2>=<l2>...      every combination of levels
    lesion          <base>-<trick>                     the base without each trick
    combination     <base>+<trick>, then <base>+all    each trick added alone, then all

A variant whose recipe equals the base's or an earlier variant's is not run
again: it is recorded as the same as that one. Across a configuration the
pipeline goes further (dawnpipe.pipeline.plan): a variant equal to an entry
of the configuration or to a variant of an earlier study runs once too, and
the study stage passes that as ``same_as`` pairs to ``load_study``, so every
study reads the one run directory. Recipes are equal when everything but
their id and description is (``recipe_key``). Variants go through the same
stages as any entry; their entry reference is ``<study file>#<variant id>``
(dawnpipe.studies.load_entry_ref reads both kinds), so no generated entry
file has to exist anywhere.

``lr_scaling: {rule: linear, base_batch: B}`` applies the linear scaling rule
to every variant whose batch size differs from B: the learning rate (and a
warm-up rate) times batch / B; ``warmup_epochs`` there sets the schedule's
warm-up length of those variants. Off unless the study asks.

``checks:`` states the claim as comparisons over the study's own results,
each decided by one statistical rule (dawnpipe.studies.checks, dawnpipe.verdict).
"""

from __future__ import annotations

import copy
import dataclasses
import itertools
import os
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from dawnpipe.entries import config_hash, fill_defaults, load_entry, validate_entry
from dawnpipe.errors import DawnpipeError
from dawnpipe.fileio import read_yaml
from dawnpipe.schemas import jsonschema_check
from dawnpipe.studies.checks import parse_checks

SEPARATOR = "#"


@dataclass(frozen=True)
class Variant:
    id: str
    overrides: dict[str, Any]
    recipe: dict[str, Any]
    same_as: str | None = None  # the id of the variant (or base) with the same recipe, which runs instead


@dataclass
class Study:
    name: str
    file: str
    doc: dict[str, Any]
    base: str
    base_recipe: dict[str, Any] = field(default_factory=dict)
    variants: list[Variant] = field(default_factory=list)

    file_seeds: list[int] | None = None  # the study file's seeds, where use_seeds replaced them
    checks: list[dict[str, Any]] = field(default_factory=list)  # the claim as checks (dawnpipe.studies.checks), complete

    @property
    def seeds(self) -> tuple[int, ...]:
        return tuple(self.doc["seeds"])

    def use_seeds(self, seeds: list[int]) -> None:
        """Run and read these seeds in place of the study file's (config key study_seeds)."""
        if list(seeds) != list(self.doc["seeds"]):
            self.file_seeds = self.file_seeds or list(self.doc["seeds"])
            self.doc["seeds"] = list(seeds)

    @property
    def ladder(self) -> list[float]:
        return [float(x) for x in self.doc["ladder"]]

    @property
    def full_budget(self) -> bool:
        return bool(self.doc["continue_past_threshold"])

    def runnable(self) -> list[Variant]:
        """The base and the variants that run (not those equal to another)."""
        return [v for v in self.variants if v.same_as is None]


def set_dotted(doc: dict[str, Any], dotted: str, value: Any, source: str) -> None:
    parts = dotted.split(".")
    node = doc
    for part in parts[:-1]:
        if not isinstance(node.get(part), dict):
            node[part] = {} if node.get(part) is None else node[part]
            if not isinstance(node[part], dict):
                raise DawnpipeError(f"{source}: override '{dotted}': '{part}' is not a mapping in the base entry")
        node = node[part]
    if value is None:
        node.pop(parts[-1], None)  # null removes the field (the schema's default applies)
    else:
        node[parts[-1]] = copy.deepcopy(value)


def scaled(recipe: dict[str, Any], rule: dict[str, Any] | None) -> dict[str, Any]:
    """The linear scaling rule: lr (and warmup_lr) times batch / base_batch, and the warm-up length it asks for."""
    if not rule:
        return recipe
    hp = recipe["hyperparameters"]
    if not all(isinstance(hp.get(k), int | float) and not isinstance(hp.get(k), bool) for k in ("batch_size", "lr")):
        # a program entry's hyperparameters are its own: the rule needs it to name both
        raise DawnpipeError("field 'lr_scaling': the linear scaling rule needs the entry's hyperparameters batch_size and lr (numbers)")
    factor = hp["batch_size"] / rule["base_batch"]
    if factor == 1:
        return recipe
    hp["lr"] = hp["lr"] * factor
    schedule = hp.get("schedule") or {}
    if "warmup_lr" in schedule:
        schedule["warmup_lr"] = schedule["warmup_lr"] * factor
    if "warmup_epochs" in rule and "warmup_epochs" in schedule:
        schedule["warmup_epochs"] = rule["warmup_epochs"]
    return recipe


def design(doc: dict[str, Any], base: str) -> list[tuple[str, dict[str, Any]]]:
    """(variant id, overrides) in the order of the study file."""
    kind = doc["design"]
    if kind in ("one-at-a-time", "factorial"):
        factors = doc.get("factors") or {}
        if kind == "one-at-a-time":
            return [(f"{base}+{f}={level}", dict(over)) for f, levels in factors.items() for level, over in levels.items()]
        names = list(factors)
        out = []
        for combo in itertools.product(*(factors[f].items() for f in names)):
            overrides: dict[str, Any] = {}
            for _, over in combo:
                overrides.update(over)
            out.append((base + "".join(f"+{f}={level}" for f, (level, _) in zip(names, combo)), overrides))
        return out
    tricks = doc.get("tricks") or {}
    if kind == "lesion":
        return [(f"{base}-{t}", dict(over)) for t, over in tricks.items()]
    singles = [(f"{base}+{t}", dict(over)) for t, over in tricks.items()]
    together: dict[str, Any] = {}
    for over in tricks.values():
        together.update(over)
    return [*singles, (f"{base}+all", together)]


def load_study(path: str | os.PathLike, entries_dir: str | os.PathLike, same_as: Mapping[str, str] | None = None) -> Study:
    """The study of ``path`` and its variants. ``same_as``: variant id -> the
    entry it runs as, where the configuration found an equal recipe outside
    the study (dawnpipe.pipeline.plan.Plan.shared_runs)."""
    path = Path(path)
    source = str(path)
    doc = read_yaml(path)
    schema = jsonschema_check.package_schema("study")
    jsonschema_check.check(doc, schema, source)
    doc = fill_defaults(doc, schema)  # continue_past_threshold: true when left out
    kind = doc["design"]
    needs = "factors" if kind in ("one-at-a-time", "factorial") else "tricks"
    if not doc.get(needs):
        raise DawnpipeError(f"{source}: field '{needs}': the {kind} design needs at least one")
    base_file = Path(entries_dir) / f"{doc['base']}.yaml"
    if not base_file.is_file():
        raise DawnpipeError(f"{source}: field 'base': no entry {doc['base']!r} ({base_file} not found)")
    base = load_entry(base_file)
    study = Study(path.stem, source, doc, doc["base"], base)
    seen = {recipe_key(base): doc["base"]}
    for vid, overrides in design(doc, doc["base"]):
        raw = copy.deepcopy(read_yaml(base_file))
        for dotted, value in overrides.items():
            set_dotted(raw, dotted, value, f"{source}: variant {vid}")
        recipe = validate_entry(raw, f"{source}: variant {vid}")
        try:
            recipe = scaled(recipe, doc.get("lr_scaling"))
        except DawnpipeError as e:
            raise DawnpipeError(f"{source}: variant {vid}: {e}") from None
        recipe["id"] = vid
        key = recipe_key(recipe)
        study.variants.append(Variant(vid, overrides, recipe, same_as=seen.get(key)))
        seen.setdefault(key, vid)
    for vid, other in (same_as or {}).items():
        at = next((i for i, v in enumerate(study.variants) if v.id == vid), None)
        if at is None:
            raise DawnpipeError(f"{source}: same_as {vid}={other}: the study has no variant {vid!r}")
        study.variants[at] = dataclasses.replace(study.variants[at], same_as=None if other == vid else other)
    study.checks = parse_checks(doc.get("checks"), [study.base, *(v.id for v in study.variants)], study.base, study.ladder, source)
    return study


def recipe_key(recipe: dict[str, Any]) -> str:
    """Equal for recipes that train the same way: everything but the id and the description."""
    return config_hash({k: v for k, v in recipe.items() if k not in ("id", "description")})


def entry_ref(study: Study, variant: str) -> str:
    return f"{study.file}{SEPARATOR}{variant}"


def load_entry_ref(ref: str | os.PathLike, entries_dir: str | os.PathLike | None = None) -> dict[str, Any]:
    """An entry file, or ``<study file>#<variant id>`` (the base entry found
    beside the study's config, in ``entries_dir`` or config/entries)."""
    ref = str(ref)
    if SEPARATOR not in ref:
        return load_entry(ref)
    path, vid = ref.rsplit(SEPARATOR, 1)
    if entries_dir is None:
        entries_dir = Path(path).resolve().parent.parent / "entries"
    study = load_study(path, entries_dir)
    for v in study.variants:
        if v.id == vid:
            return v.recipe
    raise DawnpipeError(f"{path}: no variant {vid!r} (the study's variants: {', '.join(v.id for v in study.variants)})")
