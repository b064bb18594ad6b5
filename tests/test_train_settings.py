"""A training run's settings and what is made of them, without training: the
settings document's hash is pinned (run.json's config_hash, the resume
state's settings hash and the pipeline's rerun trigger all rest on it), the
typed settings read the document as it is, run.json's document has today's
fields, and every registered trainer module is a TrainerModule."""

from __future__ import annotations

import argparse
import importlib
import inspect

import pytest
import yaml

from dawnpipe.entries import config_hash
from dawnpipe.runfiles import check_run_file
from dawnpipe.train import TRAINERS, TrainerModule, cli
from dawnpipe.train.finish import FinishedRun, run_document
from dawnpipe.train.settings import RunSettings

ZOO = {
    "task": "fashion-mnist",
    "framework": "pytorch",
    "model": "fastnet",
    "model_args": {"widths": [8, 16, 32, 64]},
    "hardware": "local-cpu",
    "device": "cpu",
    "hyperparameters": {"batch_size": 64, "epochs": 3, "lr": 1, "schedule": {"kind": "onecycle", "peak_epoch": 1}, "augment": {"flip": True}},
}
PROGRAM = {
    "task": "fashion-mnist",
    "hardware": "local-cpu",
    "program": {"contract": 2, "workdir": "examples/programs", "command": ["python", "train.py", "--data", "{data}", "--out", "{out}", "--lr", "{hp.lr}"]},
    "hyperparameters": {"lr": 0.2},
}
# sha256 of each settings document as `dawnpipe train` makes it from these entries and arguments:
# a change here changes every run's config_hash, discards every resume state and reruns every train job
PINNED = {
    "zoo": "add51bb026ab3507d9b3eecde0cb2b4d784ece7d9f73b719d0a935f93d2cec18",
    "program": "dfa12c1128071dd899c4d8718471ee9ff4caf77725649ae782bea70aa0d3071c",
}


def settings_document(tmp_path, name: str, entry: dict, *extra: str) -> dict:
    """The settings document of `dawnpipe train --entry <name>.yaml ...`, as train.cli makes it."""
    path = tmp_path / f"pinned-{name}.yaml"
    path.write_text(yaml.safe_dump(entry))
    parser = argparse.ArgumentParser()
    cli.configure(parser)
    args = ["--entry", str(path), "--seed", "3", "--data", "d", "--tsv", "t", "--log-parquet", "p", "--checkpoint", "c", "--run-json", "r"]
    return cli.settings_from_args(parser.parse_args([*args, "--threshold", "85", "--train-limit", "3000", "--test-limit", "500", *extra]))


@pytest.mark.parametrize("name", ["zoo", "program"])
def test_the_config_hash_of_a_run_is_pinned(tmp_path, name):
    entry, extra = (ZOO, ("--stop-at-threshold",)) if name == "zoo" else (PROGRAM, ("--held-back", "0.25"))
    document = settings_document(tmp_path, name, entry, *extra)
    settings = RunSettings.of(document)
    assert config_hash(document) == settings.config_hash == PINNED[name]
    assert settings.document == document and settings.document is not document  # a copy: nothing read later changes what was hashed


def test_typed_settings_keep_the_documents_values(tmp_path):
    zoo = RunSettings.of(settings_document(tmp_path, "zoo", ZOO, "--stop-at-threshold"))
    assert (zoo.seed, zoo.threshold, zoo.train_limit, zoo.test_limit, zoo.stop_at_threshold, zoo.demo_threshold) == (3, 85.0, 3000, 500, True, True)
    assert zoo.entry.id == "pinned-zoo" and zoo.entry.layout.world_size == 1 and zoo.programs is None and zoo.entry.program is None
    recipe = zoo.entry.recipe
    assert recipe.lr == 1 and isinstance(recipe.lr, int)  # as written: what is logged and hashed is the entry's value
    assert (recipe.epochs, recipe.batch_size, recipe.optimizer, recipe.augment.flip, recipe.augment.crop_padding) == (3, 64, "sgd", True, 0)
    assert recipe.schedule == {"kind": "onecycle", "peak_epoch": 1, "start_fraction": 0.1, "end_fraction": 0.0, **_step_defaults()}
    program = RunSettings.of(settings_document(tmp_path, "program", PROGRAM, "--held-back", "0.25"))
    assert program.entry.recipe is None and program.entry.is_program and program.entry.hyperparameters == {"lr": 0.2}
    assert (program.programs.held_back_fraction, program.programs.startup_allowance_cpu_seconds, program.programs.evaluation_factor) == (0.25, 15.0, 2.0)


def _step_defaults() -> dict:
    return {"warmup_epochs": 0, "warmup_lr": 0.01, "milestones": [], "gamma": 0.1}


def test_run_json_has_the_fields_its_readers_rely_on(tmp_path):
    settings = RunSettings.of(settings_document(tmp_path, "program", PROGRAM))
    finished = FinishedRun({"reached": True, "train_items": 3000}, {"framework": "program"}, {"contract": 2})
    environment = {"threads": 2, "cpu_model": "a CPU"}
    doc = run_document(
        settings,
        finished,
        environment=environment,
        threads_from="job",
        data_manifest_sha256="m",
        started="2026-01-01T00:00:00+00:00",
        finished="2026-01-01T00:01:00+00:00",
        telemetry={"samples": 0},
    )
    assert list(doc) == [
        *("entry", "seed", "task", "framework", "model", "hardware", "hardware_price_tag", "world_size", "nodes", "processes"),
        *("threads_per_process", "threads_from", "threshold", "official_threshold", "demo_threshold", "config_hash"),
        *("data_manifest_sha256", "started", "finished", "result", "environment", "settings", "telemetry", "program"),
    ]
    assert doc["config_hash"] == config_hash(doc["settings"]) and doc["settings"] is settings.document
    assert (doc["entry"], doc["seed"], doc["framework"], doc["model"], doc["threads_per_process"]) == ("pinned-program", 3, "program", "train.py", 2)
    assert doc["result"] is finished.result and doc["program"] == {"contract": 2}
    zoo = run_document(
        RunSettings.of(settings_document(tmp_path, "zoo", ZOO)),
        FinishedRun({}, {}),
        environment=environment,
        threads_from="job",
        data_manifest_sha256="m",
        started="s",
        finished="f",
        telemetry={},
    )
    assert "program" not in zoo and zoo["hardware"] == zoo["hardware_price_tag"] == "local-cpu"
    check_run_file(zoo, tmp_path / "run.json", "run_complete")  # as the report reads it (schemas/run_files.schema.yaml)
    check_run_file(zoo, tmp_path / "run.json", "run_measured")  # as the utilization stage reads it


@pytest.mark.parametrize("name", sorted(set(TRAINERS.values())))
def test_every_registered_trainer_is_a_trainer_module(name):
    module = importlib.import_module(name)
    assert isinstance(module, TrainerModule), name
    for method in ("check_entry", "train"):
        wanted = inspect.signature(getattr(TrainerModule, method))
        wanted = wanted.replace(parameters=list(wanted.parameters.values())[1:])  # less self
        found = inspect.signature(getattr(module, method))
        for param in wanted.parameters.values():
            assert param.name in found.parameters, (name, method, param.name)
            got = found.parameters[param.name]
            assert (got.kind, got.default, got.annotation) == (param.kind, param.default, param.annotation), (name, method, got, param)
        more = [p for p in found.parameters.values() if p.name not in wanted.parameters]
        assert all(p.kind is p.KEYWORD_ONLY and p.default is not p.empty for p in more), (name, method, more)  # rank=, with a default
        assert found.return_annotation in (wanted.return_annotation, wanted.return_annotation.removesuffix(" | None")), (name, method)


def test_precision_auto_is_bf16_only_where_the_device_computes_it(monkeypatch):
    """An entry's precision: auto computes in bf16 on a CPU with bf16 instructions and in fp32 on one without,
    where bf16 would be emulated (docs/entries.md); any other precision is as the entry states."""
    from dawnpipe.models import precision

    monkeypatch.setattr(precision, "cpu_flags", lambda: {"avx2", "avx512f", "avx512_bf16"})
    assert precision.used_precision("auto", "cpu") == ("bf16", "auto: this CPU has avx512_bf16")
    monkeypatch.setattr(precision, "cpu_flags", lambda: {"avx2", "amx_bf16"})
    assert precision.used_precision("auto", "cpu")[0] == "bf16"
    monkeypatch.setattr(precision, "cpu_flags", lambda: {"avx2", "fma"})
    used, why = precision.used_precision("auto", "cpu")
    assert used == "fp32" and "emulated" in why
    assert precision.used_precision("bf16", "cpu") == ("bf16", "as the entry states")
    assert precision.used_precision("fp32", "cuda") == ("fp32", "as the entry states")
