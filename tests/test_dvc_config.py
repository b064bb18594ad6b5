"""dvc.yaml against the config and the code, without running DVC: the data
sets it versions, the config keys it reads, and the argument forms its stage
commands use (YAML null as ``None``, booleans as ``true``/``false``, per-task
mappings as ``--<task> VALUE``) meaning what Snakemake's forms mean."""

from __future__ import annotations

import argparse
import json
import re
import shlex
from pathlib import Path, PurePosixPath

import pytest
import yaml
from conftest import ROOT, run_cli

from dawnpipe.argtypes import boolean, optional_int, task_option
from dawnpipe.data.fetch import FETCHERS
from dawnpipe.data.loader import prepared_dir
from dawnpipe.entries import load_entry
from dawnpipe.errors import DawnpipeError
from dawnpipe.runfiles import files_under, run_dirs
from dawnpipe.tasks import all_tasks

DVC_YAML = yaml.safe_load((ROOT / "dvc.yaml").read_text(encoding="utf-8"))
# The configs DVC runs (copied over config/config.yaml); the test-<task>.yaml
# configs fetch generated data with data_checksums, which only Snakemake passes.
CONFIGS = [ROOT / "config" / name for name in ("config.yaml", "test.yaml", "benchmark.yaml")]


def interpolated_names() -> set[str]:
    """Every ``${name}`` of dvc.yaml that comes from the config (not the loop's item)."""
    text = (ROOT / "dvc.yaml").read_text(encoding="utf-8")
    names = set(re.findall(r"\$\{([^}]+)\}", text))
    return {n for n in names if n.split(".")[0] not in ("item", "key")}


def test_dvc_reads_the_snakemake_config():
    assert DVC_YAML["vars"] == ["config/config.yaml"]


def test_dvc_versions_data_sets_dawnpipe_can_fetch():
    datasets = DVC_YAML["stages"]["fetch"]["foreach"]
    assert DVC_YAML["stages"]["prepare"]["foreach"] == datasets
    for name in datasets:
        assert all_tasks()[name].data.get("kind") in FETCHERS, name


@pytest.mark.parametrize("config", CONFIGS, ids=lambda p: p.name)
def test_every_config_defines_what_dvc_reads(config):
    doc = yaml.safe_load(config.read_text(encoding="utf-8"))
    names = interpolated_names()
    assert {"entries", "seeds", "entries_dir", "prices", "thresholds", "data_sources"} <= {n.split(".")[0] for n in names}
    for name in sorted(names):
        value = doc
        for part in name.split("."):
            assert isinstance(value, dict) and part in value, f"{config.name} has no {name}, which dvc.yaml interpolates"
            value = value[part]


@pytest.mark.parametrize("config", CONFIGS, ids=lambda p: p.name)
def test_every_configured_entry_has_its_data_set_in_dvc(config):
    doc = yaml.safe_load(config.read_text(encoding="utf-8"))
    for entry_id in doc["entries"]:
        task = load_entry(ROOT / doc["entries_dir"] / f"{entry_id}.yaml")["task"]
        assert task in DVC_YAML["stages"]["fetch"]["foreach"], f"{config.name}: {entry_id} is a {task} entry"


def test_no_dvc_stage_reads_the_config_itself():
    """Values arrive as arguments; the config file is only a params source."""
    for name, stage in DVC_YAML["stages"].items():
        body = stage.get("do", stage)
        assert "config/config.yaml" not in body["cmd"], name
        assert "config/config.yaml" not in body.get("deps", []), name


def test_optional_int_reads_what_dvc_writes_for_null():
    assert optional_int("None") is None
    assert optional_int("null") is None
    assert optional_int("3000") == 3000
    for bad in ("0", "-5", "3.5", "many"):
        with pytest.raises(argparse.ArgumentTypeError):
            optional_int(bad)


def test_boolean_reads_what_dvc_writes():
    assert boolean("true") is True and boolean("True") is True
    assert boolean("false") is False and boolean("False") is False
    with pytest.raises(argparse.ArgumentTypeError):
        boolean("maybe")


def _train_args(*extra: str):
    from dawnpipe.train import cli

    parser = argparse.ArgumentParser()
    cli.configure(parser)
    base = [
        "--entry",
        str(ROOT / "config/entries/fastnet.yaml"),
        "--seed",
        "1",
        "--data",
        "data/prepared",
        "--tsv",
        "t",
        "--log-parquet",
        "p",
        "--checkpoint",
        "c",
        "--run-json",
        "r",
    ]
    return cli.settings_from_args(parser.parse_args([*base, *extra]))


def test_train_settings_are_the_same_from_the_snakemake_and_the_dvc_form():
    snakemake = _train_args("--threshold", "70.0", "--train-limit", "3000", "--test-limit", "500", "--stop-at-threshold")
    dvc = _train_args("--train-limit", "3000", "--test-limit", "500", "--stop-at-threshold", "true", "--fashion-mnist", "70.0")
    assert dvc == snakemake
    assert dvc["threshold"] == 70.0 and dvc["demo_threshold"] and dvc["stop_at_threshold"]

    official = _train_args()  # benchmark.yaml under Snakemake: no options at all
    assert _train_args("--train-limit", "None", "--test-limit", "None", "--stop-at-threshold", "false") == official
    assert official["threshold"] == all_tasks()["fashion-mnist"].threshold and not official["stop_at_threshold"]


def test_a_threshold_for_another_task_does_not_apply():
    settings = _train_args("--cifar10", "80", "--fashion-mnist", "71")
    assert settings["threshold"] == 71.0
    assert _train_args("--cifar10", "80")["threshold"] == all_tasks()["fashion-mnist"].threshold
    assert _train_args("--threshold", "72", "--fashion-mnist", "71")["threshold"] == 72.0


def test_fetch_takes_its_own_task_source_from_the_dvc_form():
    from dawnpipe.data import fetch

    parser = argparse.ArgumentParser()
    fetch.configure(parser)
    args = parser.parse_args(["fashion-mnist", "--dest", "d", "--cifar10", "/elsewhere", "--fashion-mnist", "/mirror"])
    assert task_option(args, "source_for", "fashion-mnist") == "/mirror"
    assert task_option(args, "source_for", "squad") is None


def _manifest(path: Path, task: str) -> Path:
    path.mkdir(parents=True)
    (path / "manifest.json").write_text(json.dumps({"task": task, "splits": {}}))
    return path


def test_prepared_dir_takes_a_data_set_or_a_directory_of_them(tmp_path):
    fm = _manifest(tmp_path / "prepared" / "fashion-mnist", "fashion-mnist")
    assert prepared_dir(tmp_path / "prepared", "fashion-mnist") == fm
    assert prepared_dir(fm, "fashion-mnist") == fm


def test_prepared_dir_names_what_is_missing_or_wrong(tmp_path):
    _manifest(tmp_path / "prepared" / "fashion-mnist", "fashion-mnist")
    with pytest.raises(DawnpipeError, match=r"prepared.*no prepared data for task cifar10.*prepared/cifar10/manifest.json.*dvc.yaml"):
        prepared_dir(tmp_path / "prepared", "cifar10")
    with pytest.raises(DawnpipeError, match=r"fashion-mnist/manifest.json: data prepared for task 'fashion-mnist', not 'cifar10'"):
        prepared_dir(tmp_path / "prepared" / "fashion-mnist", "cifar10")


def test_run_dirs_and_files_under_find_runs_below_directories(tmp_path):
    runs = tmp_path / "runs"
    for entry, seed in [("b", 1), ("a", 0), ("b", 0)]:
        d = runs / entry / f"seed{seed}"
        d.mkdir(parents=True)
        (d / "run.json").write_text("{}")
        (d / "time_to_accuracy.json").write_text("{}")
    (runs / "a" / ".gitignore").write_text("/seed0\n")
    expected = [runs / "a/seed0", runs / "b/seed0", runs / "b/seed1"]
    assert run_dirs([runs]) == expected
    assert run_dirs([runs / "b/seed1", runs / "a"]) == [runs / "b/seed1", runs / "a/seed0"]
    assert files_under([runs / "b"], "time_to_accuracy.json") == [runs / "b/seed0/time_to_accuracy.json", runs / "b/seed1/time_to_accuracy.json"]
    assert files_under([tmp_path / "given.json"], "*.json") == [tmp_path / "given.json"]
    (tmp_path / "empty").mkdir()
    with pytest.raises(DawnpipeError, match=r"empty: no run directory"):
        run_dirs([tmp_path / "empty"])
    with pytest.raises(DawnpipeError, match=r"empty: no \*\.json below"):
        files_under([tmp_path / "empty"], "*.json")


def test_train_without_its_data_set_says_what_to_add(tmp_path):
    (tmp_path / "prepared").mkdir()
    run = tmp_path / "runs"
    proc = run_cli(
        "train",
        "--entry",
        str(ROOT / "config/entries/fastnet.yaml"),
        "--seed",
        "0",
        "--data",
        str(tmp_path / "prepared"),
        "--tsv",
        str(run / "t.tsv"),
        "--log-parquet",
        str(run / "t.parquet"),
        "--checkpoint",
        str(run / "m.pt"),
        "--run-json",
        str(run / "run.json"),
        "--train-limit",
        "None",
        "--stop-at-threshold",
        "true",
        "--fashion-mnist",
        "70",
    )
    assert proc.returncode == 1, proc.stderr
    assert "no prepared data for task fashion-mnist" in proc.stderr and "dvc.yaml" in proc.stderr
    assert "Traceback" not in proc.stderr and not run.exists()


# ------------------------------------------------- every config, as DVC resolves it

# Every run config in the repository (prices.yaml is a params file, not a config).
RUN_CONFIGS = sorted(p for p in (ROOT / "config").glob("*.yaml") if "entries" in (yaml.safe_load(p.read_text(encoding="utf-8")) or {}))
# What a FLOP count reads of an entry: dvc.yaml's flops params (DVC fails on a missing one).
FLOPS_KEYS = ["task", "framework", "model", "model_args", "hyperparameters.batch_size", "hyperparameters.precision", "hyperparameters.channels_last"]


def resolve(tmp_path: Path, config: dict) -> list:
    """dvc.yaml's stages as DVC resolves them with ``config`` as config/config.yaml."""
    from dvc.repo import Repo

    repo = tmp_path / "repo"
    (repo / "config").mkdir(parents=True)
    (repo / "dvc.yaml").write_text((ROOT / "dvc.yaml").read_text(encoding="utf-8"), encoding="utf-8")
    (repo / "config/config.yaml").write_text(yaml.safe_dump(config, sort_keys=False), encoding="utf-8")
    Repo.init(str(repo), no_scm=True).close()
    with Repo(str(repo)) as dvc:
        return list(dvc.index.stages)


def lookup(doc, dotted: str):
    for part in dotted.split("."):
        assert isinstance(doc, dict) and part in doc, f"no {dotted}"
        doc = doc[part]
    return doc


def test_the_run_configs_are_found():
    names = {p.name for p in RUN_CONFIGS}
    assert {
        "config.yaml",
        "test.yaml",
        "benchmark.yaml",
        "scaling.yaml",
        "test-cifar10.yaml",
        "test-imagenet.yaml",
        "test-squad.yaml",
    } <= names and "prices.yaml" not in names


@pytest.mark.parametrize("config", RUN_CONFIGS, ids=lambda p: p.name)
def test_every_config_gives_a_valid_dvc_pipeline(tmp_path, config):
    """DVC resolves dvc.yaml with the config; every command parses as its
    dawnpipe command's arguments; every dep that no stage writes exists; every
    param names a file of the repository and keys that file has."""
    import importlib

    from dawnpipe.cli import COMMANDS

    doc = yaml.safe_load(config.read_text(encoding="utf-8"))
    stages = resolve(tmp_path, doc)
    names = {s.name.split("@")[0] for s in stages}
    assert names == {"fetch", "prepare", "train", "extract", "infer", "flops", "utilization", "sensitivity", "stability", "export_submissions", "report"}
    assert len([s for s in stages if s.name.startswith("train@")]) == len(doc["entries"]) * len(doc["seeds"])
    outs = {PurePosixPath(str(o.def_path)) for s in stages for o in s.outs}
    for stage in stages:
        words = shlex.split(stage.cmd)
        assert words[0] == "scripts/dvc-stage" and words[2:4] == ["python", "-m"] and words[4] == "dawnpipe", stage.cmd
        parser = argparse.ArgumentParser(exit_on_error=False)
        importlib.import_module(COMMANDS[words[5]][0]).configure(parser)
        try:
            parser.parse_args(words[6:])
        except (argparse.ArgumentError, SystemExit) as e:
            pytest.fail(f"{config.name}: {stage.name}: {e}: {stage.cmd}")
        for dep in stage.deps:
            path = PurePosixPath(str(dep.def_path))
            if hasattr(dep, "params"):
                file = yaml.safe_load((ROOT / path).read_text(encoding="utf-8")) if path != PurePosixPath("config/config.yaml") else doc
                for key in dep.params or []:
                    try:
                        lookup(file, key)
                    except AssertionError as e:
                        pytest.fail(f"{config.name}: {stage.name}: {path}: {e}")
            elif not any(path == o or o in path.parents or path in o.parents for o in outs):  # written by a stage
                assert (ROOT / path).exists(), f"{config.name}: {stage.name}: dep {path} does not exist"


def test_every_entry_file_writes_out_what_the_flops_stage_reads():
    stage = DVC_YAML["stages"]["flops"]["do"]
    (params,) = [p for p in stage["params"] if isinstance(p, dict) and "${entries_dir}/${item}.yaml" in p]
    assert params["${entries_dir}/${item}.yaml"] == FLOPS_KEYS
    for path in sorted((ROOT / "config/entries").rglob("*.yaml")):
        doc = yaml.safe_load(path.read_text(encoding="utf-8"))
        for key in FLOPS_KEYS:
            lookup(doc, key)


def test_the_dvc_report_passes_the_configured_submission_dirs(tmp_path):
    """As workflow/rules/report.smk: ``--submissions`` every directory of
    submission_dirs, in order; the list is a param (adding one reruns it)."""
    doc = yaml.safe_load((ROOT / "config/config.yaml").read_text(encoding="utf-8"))
    doc["submission_dirs"] = ["results/submissions", "../shared/dawnbench entries", "audited"]
    (report,) = [s for s in resolve(tmp_path, doc) if s.name.startswith("report@")]
    words = shlex.split(report.cmd)
    at = words.index("--submissions")
    assert words[at + 1 : at + 4] == doc["submission_dirs"] and words[at + 4].startswith("--")
    (params,) = [d for d in report.deps if hasattr(d, "params")]
    assert "submission_dirs" in params.params


@pytest.mark.parametrize("rules", [[], ["audit rules.yaml"], ["a.yaml", "b.yaml"]])
def test_the_dvc_report_passes_the_configured_audit_rules(tmp_path, rules):
    """As workflow/rules/report.smk: ``--rules`` every file of audit_rules, in
    order, and no --rules at all for the empty list; the list is a param."""
    doc = yaml.safe_load((ROOT / "config/config.yaml").read_text(encoding="utf-8"))
    doc["audit_rules"] = rules
    (report,) = [s for s in resolve(tmp_path, doc) if s.name.startswith("report@")]
    words = shlex.split(report.cmd)
    if not rules:
        assert "--rules" not in words and "None" not in words
    else:
        at = words.index("--rules")
        assert words[at + 1 : at + 1 + len(rules)] == rules and words[at + 1 + len(rules)].startswith("--")
    (params,) = [d for d in report.deps if hasattr(d, "params")]
    assert "audit_rules" in params.params
