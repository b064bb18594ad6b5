"""What a configuration asks for: its entries (read and checked once), their
runs, the tasks they need, and the per-job values the stages pass on.

Both front ends build one Plan from the resolved configuration (Snakemake at
parse time, the DVC generator when it writes dvc.yaml) and read every value
through it, so a threshold or a data source means the same under both.
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from dawnpipe.entries import config_hash, load_entry, run_settings
from dawnpipe.errors import DawnpipeError
from dawnpipe.pipeline.config import Config, check_task_keys

RUN_DIR = "results/runs/{entry}/seed{seed}"  # a run's directory: its entry and seed
# A study variant's recipe, resolved (its base entry with the study's
# overrides), written by `dawnpipe pipeline dvc`: what DVC compares by value to
# rerun the variant's stages, as it compares an entry file for an entry.
VARIANT_PARAMS = "dvc-variants/{entry}.yaml"


@dataclass(frozen=True)
class Entry:
    id: str
    file: str  # the entry file its values come from (relative to the project)
    recipe: dict[str, Any]  # validated, defaults filled (dawnpipe.entries.load_entry)
    seeds: tuple[int, ...]
    full_budget: bool = False  # a study wants whole curves: never stop at the threshold
    also: tuple[str, ...] = ()  # other files its values come from (a study variant's base entry)

    @property
    def path(self) -> str:
        """The file its values are in (a study variant's: the study file)."""
        return self.file.split("#", 1)[0]

    @property
    def is_variant(self) -> bool:
        return bool(self.also)

    @property
    def params_file(self) -> str:
        """The file DVC reads this entry's recipe from by value: its entry file, or a variant's resolved recipe."""
        return VARIANT_PARAMS.format(entry=self.id) if self.is_variant else self.file

    @property
    def task(self) -> str:
        return self.recipe["task"]

    @property
    def framework(self) -> str:
        return self.recipe["framework"]


class Plan:
    def __init__(self, config: Config):
        from dawnpipe import tasks

        self.config = config
        if config["task_dirs"]:
            tasks.use_task_dirs(config["task_dirs"])
        self.tasks_known = tasks.all_tasks()
        check_task_keys(config, self.tasks_known)
        self.entries: dict[str, Entry] = {}
        for entry_id in config["entries"]:
            path = os.path.join(config["entries_dir"], f"{entry_id}.yaml")
            recipe = load_entry(path)
            self.entries[entry_id] = Entry(entry_id, path, recipe, tuple(config["seeds"]))
        self.studies = self.add_studies()
        self.check_new_test()
        if not self.entries:
            raise DawnpipeError(f"{self.config.where('entries')}: field 'entries': no entries and no studies: nothing to run")
        self.check_backends()

    def add_studies(self) -> dict[str, Any]:
        """The config's studies: their base entries and their variants become
        entries (seeds: the union of what asks for them; whole curves if any
        study wants them). A recipe runs once in the whole configuration: a
        variant equal to an entry (of the config, or a study's base) runs as
        that entry; one equal to a variant met earlier (the studies in the
        config's order, each in its file's order) as that variant. Ids never
        change: only where a variant's runs are (``shared_runs``)."""
        from dawnpipe.studies import entry_ref, load_study, recipe_key

        studies = {}
        for name in self.config["studies"]:
            path = os.path.join(self.config["studies_dir"], f"{name}.yaml")
            if not os.path.isfile(path):
                raise DawnpipeError(f"{self.config.where('studies')}: field 'studies': no study {name!r} ({path} not found)")
            studies[name] = load_study(path, self.config["entries_dir"])
            if self.config["study_seeds"] is not None:  # the config's seeds in place of the file's (so in its values too)
                studies[name].use_seeds(self.config["study_seeds"])
        for study in studies.values():  # entries first: a variant equal to one runs as it
            self._add(study.base, os.path.join(self.config["entries_dir"], f"{study.base}.yaml"), study.base_recipe, study, ())
        runs_as: dict[str, str] = {}
        for e in self.entries.values():
            runs_as.setdefault(recipe_key(e.recipe), e.id)
        self.runs_as: dict[str, dict[str, str]] = {}
        for name, study in studies.items():
            base_file = os.path.join(self.config["entries_dir"], f"{study.base}.yaml")
            mapping = self.runs_as[name] = {}
            for v in study.variants:
                have = self.entries.get(v.id)
                if have is not None and recipe_key(have.recipe) != recipe_key(v.recipe):
                    raise DawnpipeError(f"{study.file}: variant {v.id!r} differs from the entry of that id another study or the config runs")
                mapping[v.id] = runs_as.setdefault(recipe_key(v.recipe), v.id)
                if mapping[v.id] == v.id:
                    self._add(v.id, entry_ref(study, v.id), v.recipe, study, (base_file,))
                else:
                    self._add(mapping[v.id], None, None, study, ())
        return studies

    def _add(self, entry_id: str, file: str | None, recipe: dict[str, Any] | None, study: Any, also: tuple[str, ...]) -> None:
        """An entry a study runs, or more seeds (and whole curves) of one already there."""
        from dataclasses import replace

        have = self.entries.get(entry_id)
        if have is None:
            self.entries[entry_id] = Entry(entry_id, file, recipe, tuple(study.seeds), study.full_budget, also)
            return
        seeds = tuple(sorted({*have.seeds, *study.seeds}))
        self.entries[entry_id] = replace(have, seeds=seeds, full_budget=have.full_budget or study.full_budget)

    def shared_runs(self, name: str) -> dict[str, str]:
        """Variants of study ``name`` whose runs are an entry's of another study
        or of the config (variant id -> that entry), beyond what the study file
        alone says (dawnpipe.studies.load_study's same_as)."""
        study = self.studies[name]
        own = {v.id: v.same_as or v.id for v in study.variants}
        return {vid: e for vid, e in self.runs_as[name].items() if own[vid] != e}

    def stop_at_threshold(self, entry: str) -> bool:
        return bool(self.config["stop_at_threshold"]) and not self.entries[entry].full_budget

    def check_new_test(self) -> None:
        """An entry asking for its task's new test set (new_test: true) needs a task that has one."""
        for e in self.entries.values():
            if e.recipe.get("new_test") and not self.task(e.task).data.get("new_test"):
                raise DawnpipeError(f"{e.file}: field 'new_test': task {e.task} has no new test set (no data.new_test in {self.task(e.task).source})")

    def wants_new_test(self, task: str) -> bool:
        """Whether an entry of ``task`` asks for its new test set (so the fetch stage gets it)."""
        return any(e.recipe.get("new_test") for e in self.entries.values() if e.task == task)

    def check_backends(self) -> None:
        """Every entry is answered by at least one of inference.backends, and every name there exists."""
        from dawnpipe.infer.backends import backends_for
        from dawnpipe.infer.items import item_kind

        wanted = self.config["inference"]["backends"]
        where = f"{self.config.where('inference')}: field 'inference.backends'"
        for e in self.entries.values():
            items = item_kind(self.task(e.task)).name
            try:
                found = backends_for(e.framework, items, wanted)
            except DawnpipeError as err:
                raise DawnpipeError(f"{where}: {err}") from None
            if not found:
                raise DawnpipeError(f"{where}: none of {wanted} answers entry {e.id}'s {items} items from {e.framework} checkpoints")

    # ------------------------------------------------------------ what runs
    def study_runs(self, name: str) -> list[str]:
        """The run directories a study's summary reads (its base's and each recipe's, wherever it runs)."""
        study = self.studies[name]
        ran = dict.fromkeys([study.base, *self.runs_as[name].values()])
        return [self.run_dir(e, s) for e in ran for s in study.seeds]

    def runs(self) -> list[tuple[str, int]]:
        return [(e.id, s) for e in self.entries.values() for s in e.seeds]

    def run_dir(self, entry: str, seed: int | str) -> str:
        return RUN_DIR.format(entry=entry, seed=seed)

    def run_files(self, name: str) -> list[str]:
        return [f"{self.run_dir(e, s)}/{name}" for e, s in self.runs()]

    def seed_files(self, entry: str, name: str) -> list[str]:
        return [f"{self.run_dir(entry, s)}/{name}" for s in self.entries[entry].seeds]

    def tasks(self) -> list[str]:
        """The tasks whose data the entries need, in the tasks' own order."""
        needed = {e.task for e in self.entries.values()}
        return [t for t in self.tasks_known if t in needed]

    def task_of(self, entry: str) -> str:
        return self.entries[entry].task

    def task(self, name: str):
        try:
            return self.tasks_known[name]
        except KeyError:
            raise DawnpipeError(f"unknown task {name!r} (known: {', '.join(self.tasks_known)})") from None

    def task_dir_words(self) -> list[str]:
        """``--task-dir DIR`` for each of the config's task directories: every command sees their tasks."""
        return [w for d in self.config["task_dirs"] for w in ("--task-dir", d)]

    def task_dir_files(self) -> list[str]:
        """The files of the config's task directories (task files, data modules): code of every stage."""
        return sorted(str(p) for d in self.config["task_dirs"] for p in Path(d).rglob("*") if p.is_file() and "__pycache__" not in p.parts)

    # ------------------------------------------------------------ per-job values
    def threshold(self, task: str) -> float:
        return float(self.config["thresholds"].get(task, self.task(task).threshold))

    def run_settings(self, entry: str, seed: int | str) -> dict[str, Any]:
        e = self.entries[entry]
        return run_settings(
            e.recipe,
            seed=int(seed),
            threshold=self.threshold(e.task),
            official_threshold=self.task(e.task).threshold,
            train_limit=self.config["train_limit"],
            test_limit=self.config["test_limit"],
            stop_at_threshold=self.stop_at_threshold(entry),
            programs=self.config["programs"],
        )

    def flops_values(self, entry: str) -> dict[str, Any]:
        """What a FLOP count reads of an entry: the network, its input and the
        step's batch, precision and memory format; not the optimizer or the schedule."""
        recipe = self.entries[entry].recipe
        if "program" in recipe:  # its network is inside the program: nothing of it to count before it runs
            return {"task": recipe["task"], "program": recipe["program"]}
        hp = recipe["hyperparameters"]
        return {k: recipe[k] for k in FLOPS_KEYS} | {k: hp[k] for k in FLOPS_HYPERPARAMETERS}

    def prices_values(self) -> Any:
        from dawnpipe.prices import load_prices

        return load_prices(Path(self.config["prices"]))

    def values_hash(self, *parts: Mapping[str, Any] | Any) -> str:
        return config_hash(list(parts))


# What a FLOP count reads of an entry (the flops stage's values; DVC fails on a
# listed key missing from the file, so every entry file writes these out).
FLOPS_KEYS = ("task", "framework", "model", "model_args")
FLOPS_HYPERPARAMETERS = ("batch_size", "precision", "channels_last")
