"""A training run's settings, typed: what the trainers read, built once.

``dawnpipe.entries.run_settings`` makes the settings *document*: the entry
(validated against its schema, every default filled in), the seed, the
threshold, the limits, stop_at_threshold and, for a program entry, the
configuration's ``programs`` rules. That document is what is hashed (run.json's
``config_hash``, the per-epoch state's settings hash, the pipeline's rerun
trigger ``run_settings``) and what run.json keeps under ``settings``; it is
never rebuilt from the fields below, so adding a field here cannot move a
hash.

``RunSettings.of(document)`` reads it once, after validation, into frozen
dataclasses: ``settings.seed``, ``settings.entry.recipe.epochs``,
``settings.programs.held_back_fraction``. Values are kept as the document
has them (an ``lr: 1`` stays the integer 1), so what the trainers compute
and log is what they computed from the dict. What reads an entry as a
mapping (the data loader, a program's placeholders) gets ``entry.document``.
"""

from __future__ import annotations

import copy
import dataclasses
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from dawnpipe.entries import config_hash, is_program
from dawnpipe.train.distributed import Layout


@dataclass(frozen=True)
class ProgramRules:
    """The configuration's rules for program entries (config key ``programs``; docs/rules.md#program-entries)."""

    startup_allowance_cpu_seconds: float  # CPU seconds of start-up off the clock
    evaluation_factor: float  # contract 1: an evaluation window off the clock, x dawnpipe's scoring
    held_back_fraction: float  # share of each class of the test split the program is never given

    @classmethod
    def of(cls, rules: Mapping[str, Any]) -> ProgramRules:
        return cls(rules["startup_allowance_cpu_seconds"], rules["evaluation_factor"], rules["held_back_fraction"])


@dataclass(frozen=True)
class Augment:
    """A zoo recipe's training-time augmentation (hyperparameters.augment)."""

    crop_padding: int  # random crop after zero padding by this many pixels (0: off)
    flip: bool  # random horizontal flip
    resized_crop_size: int  # random_resized_crop.size: side of the crops (0: off)
    resized_crop_min_scale: float  # random_resized_crop.min_scale

    @classmethod
    def of(cls, augment: Mapping[str, Any]) -> Augment:
        crop = augment["random_resized_crop"]
        return cls(augment["crop_padding"], augment["flip"], crop["size"], crop["min_scale"])


@dataclass(frozen=True)
class Recipe:
    """A zoo entry's hyperparameters (schemas/entry.schema.yaml: units and meaning there)."""

    batch_size: int  # global, over all processes
    epochs: int  # the epoch budget
    optimizer: str  # sgd, adam or adamw
    lr: float
    momentum: float  # SGD's momentum, Adam's beta1
    nesterov: bool
    weight_decay: float
    label_smoothing: float
    precision: str  # fp32, bf16 or fp16 (an entry's auto: what it came to on the run's device, RunSettings.computing_in)
    channels_last: bool
    tta_flip: bool
    eval_batch_size: int
    schedule: Mapping[str, Any]  # as dawnpipe.train.schedule.lr_at reads it
    augment: Augment
    # the mapping itself, for what takes a recipe whole: the per-epoch state's
    # schedule position (dawnpipe.train.state) and the evaluation helpers
    hyperparameters: Mapping[str, Any] = field(repr=False)

    @classmethod
    def of(cls, hp: Mapping[str, Any]) -> Recipe:
        return cls(
            batch_size=hp["batch_size"],
            epochs=hp["epochs"],
            optimizer=hp["optimizer"],
            lr=hp["lr"],
            momentum=hp["momentum"],
            nesterov=hp["nesterov"],
            weight_decay=hp["weight_decay"],
            label_smoothing=hp["label_smoothing"],
            precision=hp["precision"],
            channels_last=hp["channels_last"],
            tta_flip=hp["tta_flip"],
            eval_batch_size=hp["eval_batch_size"],
            schedule=hp["schedule"],
            augment=Augment.of(hp["augment"]),
            hyperparameters=hp,
        )


@dataclass(frozen=True)
class Entry:
    """The entry of a run, as the trainers read it."""

    id: str
    task: str
    framework: str  # pytorch, tensorflow, or program
    model: str  # the zoo's name, or a program's (program.name, else its script)
    model_args: Mapping[str, Any]
    hardware: str  # the priced hardware tag
    device: str  # auto, cpu or cuda
    threads: int | None  # the entry's framework threads per process; None: the job's share
    layout: Layout  # its processes (distributed:)
    recipe: Recipe | None  # a zoo entry's hyperparameters; None for a program entry (the program is the recipe)
    program: Mapping[str, Any] | None  # a program entry's program section; None for a zoo entry
    hyperparameters: Mapping[str, Any]  # as written: a program's are free-form ({hp.NAME} of its command)
    document: Mapping[str, Any] = field(repr=False)  # the entry itself, for what reads an entry as a mapping

    @classmethod
    def of(cls, entry: Mapping[str, Any]) -> Entry:
        program = is_program(entry)
        return cls(
            id=entry["id"],
            task=entry["task"],
            framework=entry["framework"],
            model=entry["model"],
            model_args=entry["model_args"],
            hardware=entry["hardware"],
            device=entry["device"],
            threads=int(entry["threads"]) if entry.get("threads") else None,
            layout=Layout.of(entry),
            recipe=None if program else Recipe.of(entry["hyperparameters"]),
            program=entry["program"] if program else None,
            hyperparameters=entry["hyperparameters"],
            document=entry,
        )

    @property
    def is_program(self) -> bool:
        return self.program is not None


@dataclass(frozen=True)
class RunSettings:
    """One training run's settings (``dawnpipe.entries.run_settings``'s document, typed)."""

    entry: Entry
    seed: int
    threshold: float  # the run's threshold of the task's metric
    official_threshold: float  # the task's own
    demo_threshold: bool  # threshold != official_threshold: every line that names it says so
    train_limit: int | None  # the first N training items only (None: all)
    test_limit: int | None  # the first N test items only (None: all)
    stop_at_threshold: bool  # end training after the first epoch at the threshold
    programs: ProgramRules | None  # a program entry's rules; None for a zoo entry
    document: Mapping[str, Any] = field(repr=False, compare=False)  # what is hashed and written to run.json
    config_hash: str = field(default="", compare=False)  # sha256 of the document (dawnpipe.entries.config_hash)

    @classmethod
    def of(cls, document: Mapping[str, Any]) -> RunSettings:
        """Typed settings of a settings document; the document is copied, so nothing read later can change what was hashed."""
        doc = copy.deepcopy(dict(document))
        programs = doc.get("programs")
        return cls(
            entry=Entry.of(doc["entry"]),
            seed=doc["seed"],
            threshold=doc["threshold"],
            official_threshold=doc["official_threshold"],
            demo_threshold=doc["demo_threshold"],
            train_limit=doc["train_limit"],
            test_limit=doc["test_limit"],
            stop_at_threshold=doc["stop_at_threshold"],
            programs=ProgramRules.of(programs) if programs is not None else None,
            document=doc,
            config_hash=config_hash(doc),
        )

    @property
    def label(self) -> str:
        """How lines name the run: ``<entry> seed <k>``."""
        return f"{self.entry.id} seed {self.seed}"

    def computing_in(self, precision: str) -> RunSettings:
        """These settings with the recipe computing in ``precision`` (what ``precision: auto`` came to on this
        device, dawnpipe.models.precision.used_precision); the document, what was asked for and hashed, stays."""
        if self.entry.recipe is None or self.entry.recipe.precision == precision:
            return self
        hyperparameters = {**self.entry.recipe.hyperparameters, "precision": precision}  # what evaluation reads of it too
        recipe = dataclasses.replace(self.entry.recipe, precision=precision, hyperparameters=hyperparameters)
        return dataclasses.replace(self, entry=dataclasses.replace(self.entry, recipe=recipe))
