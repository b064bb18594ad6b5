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

RUN = "results/runs/{entry}/seed{seed}"


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
        if not self.entries:
            raise DawnpipeError(f"{self.config.where('entries')}: field 'entries': no entries and no studies: nothing to run")
        self.check_backends()

    def add_studies(self) -> dict[str, Any]:
        """The config's studies: their base entries and the variants that run
        become entries (seeds: the union with what else asks for them)."""
        from dataclasses import replace

        from dawnpipe.studies import entry_ref, load_study

        studies = {}
        for name in self.config["studies"]:
            path = os.path.join(self.config["studies_dir"], f"{name}.yaml")
            if not os.path.isfile(path):
                raise DawnpipeError(f"{self.config.where('studies')}: field 'studies': no study {name!r} ({path} not found)")
            study = studies[name] = load_study(path, self.config["entries_dir"])
            base_file = os.path.join(self.config["entries_dir"], f"{study.base}.yaml")
            wanted = [(study.base, base_file, study.base_recipe)]
            wanted += [(v.id, entry_ref(study, v.id), v.recipe) for v in study.runnable()]
            for entry_id, file, recipe in wanted:
                also = (base_file,) if file != base_file else ()
                have = self.entries.get(entry_id)
                if have is not None and config_hash(have.recipe) != config_hash(recipe):
                    raise DawnpipeError(f"{path}: variant {entry_id!r} differs from the entry of that id another study or the config runs")
                seeds = tuple(sorted({*(have.seeds if have else ()), *study.seeds}))
                full = study.full_budget or (have.full_budget if have else False)
                self.entries[entry_id] = replace(have, seeds=seeds, full_budget=full) if have else Entry(entry_id, file, recipe, seeds, full, also)
        return studies

    def stop_at_threshold(self, entry: str) -> bool:
        return bool(self.config["stop_at_threshold"]) and not self.entries[entry].full_budget

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
        """The run directories a study's summary reads (its base and the variants that run)."""
        study = self.studies[name]
        return [self.run_dir(e, s) for e in [study.base, *(v.id for v in study.runnable())] for s in study.seeds]

    def runs(self) -> list[tuple[str, int]]:
        return [(e.id, s) for e in self.entries.values() for s in e.seeds]

    def run_dir(self, entry: str, seed: int | str) -> str:
        return RUN.format(entry=entry, seed=seed)

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
        )

    def flops_values(self, entry: str) -> dict[str, Any]:
        """What a FLOP count reads of an entry: the network, its input and the
        step's batch, precision and memory format; not the optimizer or the schedule."""
        recipe = self.entries[entry].recipe
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
