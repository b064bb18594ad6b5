"""dvc.yaml against the stage table, the configs and the code, without running
a stage: the committed file is what the generator writes; every config gives a
pipeline DVC accepts, whose commands parse as their dawnpipe command's
arguments, whose deps exist or are made by a stage, and whose params name keys
their files have; an out-of-date dvc.yaml is refused in one line. Also the
argument forms DVC once needed (YAML null as ``None``, ``--<task> VALUE``),
which the commands still accept."""

from __future__ import annotations

import argparse
import importlib
import json
import shlex
import shutil
from pathlib import Path, PurePosixPath

import pytest
import yaml
from conftest import ROOT, run_cli

from dawnpipe.argtypes import boolean, optional_int, task_option
from dawnpipe.cli import COMMANDS
from dawnpipe.data.loader import prepared_dir
from dawnpipe.errors import DawnpipeError
from dawnpipe.pipeline.config import resolve
from dawnpipe.pipeline.dvc import documents
from dawnpipe.pipeline.plan import FLOPS_HYPERPARAMETERS, FLOPS_KEYS, Plan
from dawnpipe.runfiles import files_under, run_dirs
from dawnpipe.tasks import all_tasks

# Every run config of the repository (prices.yaml is a price table, not a config).
RUN_CONFIGS = sorted(p.relative_to(ROOT) for p in (ROOT / "config").glob("*.yaml") if p.name != "prices.yaml")


def test_the_committed_dvc_yaml_is_what_the_stage_table_writes(monkeypatch):
    monkeypatch.chdir(ROOT)
    dvc_text, params_text = documents(resolve([]))
    assert (ROOT / "dvc.yaml").read_text(encoding="utf-8") == dvc_text, "dvc.yaml is out of date: run `make dvc.yaml`"
    assert (ROOT / "params.yaml").read_text(encoding="utf-8") == params_text, "params.yaml is out of date: run `make dvc.yaml`"


def project_copy(tmp_path: Path) -> Path:
    dest = tmp_path / "project"
    for part in ("workflow", "config", "src", "scripts", "examples"):  # examples: the program entries' scripts
        shutil.copytree(ROOT / part, dest / part, ignore=shutil.ignore_patterns("__pycache__"))
    for part in ("dvc.yaml", "params.yaml"):
        shutil.copy2(ROOT / part, dest / part)
    return dest


def test_an_out_of_date_dvc_yaml_is_refused_in_one_line(tmp_path):
    project = project_copy(tmp_path)
    assert run_cli("pipeline", "dvc", "--check", cwd=project).returncode == 0
    config = project / "config/config.yaml"
    original = config.read_text(encoding="utf-8")
    config.write_text(original.replace("fashion-mnist: 88.0", "fashion-mnist: 87.0"), encoding="utf-8")
    proc = run_cli("pipeline", "dvc", "--check", cwd=project)
    assert proc.returncode == 1 and proc.stdout == ""
    (line,) = proc.stderr.splitlines()
    assert line.startswith("dawnpipe pipeline: error: dvc.yaml and params.yaml out of date with config/config.yaml")
    assert "(changed: thresholds {'fashion-mnist': 88.0} -> {'fashion-mnist': 87.0})" in line
    assert line.endswith("write them again with `dawnpipe pipeline dvc` (or `make dvc.yaml`), then `dvc repro`")
    # a comment edit changes nothing the generator writes
    config.write_text(original + "# a comment\n", encoding="utf-8")
    assert run_cli("pipeline", "dvc", "--check", cwd=project).returncode == 0


def test_the_check_uses_the_config_files_params_yaml_was_written_from(tmp_path):
    project = project_copy(tmp_path)
    assert run_cli("pipeline", "dvc", "--config", "config/test.yaml", cwd=project, check=True).stdout.startswith(
        "pipeline: wrote dvc.yaml and params.yaml for config/config.yaml + config/test.yaml"
    )
    assert yaml.safe_load((project / "params.yaml").read_text())["config_files"] == ["config/config.yaml", "config/test.yaml"]
    assert run_cli("pipeline", "dvc", "--check", cwd=project).returncode == 0
    test = project / "config/test.yaml"
    test.write_text(test.read_text(encoding="utf-8").replace("train_limit: 3000", "train_limit: 2000"), encoding="utf-8")
    proc = run_cli("pipeline", "dvc", "--check", cwd=project)
    assert proc.returncode == 1 and "out of date with config/config.yaml + config/test.yaml" in proc.stderr
    assert "`dawnpipe pipeline dvc --config config/test.yaml`" in proc.stderr


def dvc_stages(tmp_path: Path, config: Path):
    """The stages DVC resolves from the dvc.yaml written for ``config``."""
    from dvc.repo import Repo

    project = project_copy(tmp_path)
    run_cli("pipeline", "dvc", *(["--config", str(config)] if config.name != "config.yaml" else []), cwd=project, check=True)
    Repo.init(str(project), no_scm=True).close()
    with Repo(str(project)) as dvc:
        return project, list(dvc.index.stages)


def lookup(doc, dotted: str):
    for part in dotted.split("."):
        assert isinstance(doc, dict) and part in doc, f"no {dotted}"
        doc = doc[part]
    return doc


def test_the_run_configs_are_found():
    assert {p.name for p in RUN_CONFIGS} >= {
        "config.yaml",
        "test.yaml",
        "benchmark.yaml",
        "scaling.yaml",
        "test-cifar10.yaml",
        "test-imagenet.yaml",
        "test-squad.yaml",
    }


@pytest.mark.parametrize("config", RUN_CONFIGS, ids=lambda p: p.name)
def test_every_config_gives_a_valid_dvc_pipeline(tmp_path, config):
    """DVC resolves the dvc.yaml written for the config; every command parses
    as its dawnpipe command's arguments; every dep that no stage writes
    exists (the code, the entry files); every param names a file of the
    project and keys that file has."""
    project, stages = dvc_stages(tmp_path, config)
    resolved = resolve([config] if config.name != "config.yaml" else [], root=project)
    names = {s.name.split("@")[0] for s in stages}
    assert names == {
        "pipeline",
        "fetch",
        "prepare",
        "train",
        "extract",
        "infer",
        "flops",
        "utilization",
        "sensitivity",
        "stability",
        "export_submissions",
        "report",
    } | ({"study"} if resolved["studies"] else set()) | ({"dawnbench"} if resolved["dawnbench_entries"]["source"] else set())
    plan = Plan(resolved)
    assert len([s for s in stages if s.name.startswith("train@")]) == len(plan.runs())
    outs = {PurePosixPath(str(o.def_path)) for s in stages for o in s.outs}
    assert not [o for o in outs if "{" in str(o)], "every wildcard of an output filled in"
    # files the config names that a user (or a test: config/test-squad.yaml) provides
    provided = {PurePosixPath(p) for key in ("data_checksums", "data_sources") for p in resolved[key].values()}
    # a dep is written by a stage when it is an output, inside one, or a directory holding one
    # (sets: a study config has hundreds of stages, each with its code deps)
    around_outs = outs | {parent for o in outs for parent in o.parents}
    parsers, docs, checked = {}, {}, set()
    for stage in stages:
        words = shlex.split(stage.cmd)
        assert words[0] == "scripts/stage" and words[1].startswith("results/logs/"), stage.cmd
        assert "config/config.yaml" not in stage.cmd, "values arrive as arguments; no stage reads the config itself"
        if words[2] not in parsers:
            parsers[words[2]] = argparse.ArgumentParser(exit_on_error=False)
            importlib.import_module(COMMANDS[words[2]][0]).configure(parsers[words[2]])
        parser = parsers[words[2]]
        try:
            parser.parse_args(words[3:])
        except (argparse.ArgumentError, SystemExit) as e:
            pytest.fail(f"{config.name}: {stage.name}: {e}: {stage.cmd}")
        for dep in stage.deps:
            path = PurePosixPath(str(dep.def_path))
            if hasattr(dep, "params"):
                if path not in docs:
                    docs[path] = yaml.safe_load((project / path).read_text(encoding="utf-8"))
                doc = docs[path]
                for key in dep.params or []:
                    try:
                        lookup(doc, key)
                    except AssertionError as e:
                        pytest.fail(f"{config.name}: {stage.name}: {path}: {e}")
            elif path not in checked and path not in provided and path not in around_outs and not outs.intersection(path.parents):
                assert (project / path).exists(), f"{config.name}: {stage.name}: dep {path} does not exist"
                checked.add(path)


def test_the_data_sets_dvc_versions_are_those_the_entries_need(tmp_path):
    _, stages = dvc_stages(tmp_path, Path("config/test-squad.yaml"))
    assert sorted(s.name for s in stages if s.name.split("@")[0] in ("fetch", "prepare")) == ["fetch@squad", "prepare@squad"]
    (fetch,) = [s for s in stages if s.name == "fetch@squad"]
    words = shlex.split(fetch.cmd)
    assert words[words.index("--source") + 1] == "data/synthetic/squad" and words[words.index("--expect") + 1] == "data/synthetic/squad/expect.yaml"
    assert "data/synthetic/squad/expect.yaml" in {str(d.def_path) for d in fetch.deps}  # an edited checksum file fetches again


def test_the_report_passes_submission_dirs_mlperf_dirs_and_audit_rules_and_depends_on_them(tmp_path):
    project = project_copy(tmp_path)
    (project / "audited").mkdir()
    (project / "ml perf").mkdir()
    (project / "audit rules.yaml").write_text("plausible: {}\n")
    layer = project / "config/extra.yaml"
    layer.write_text("submission_dirs: [results/submissions, audited]\naudit_rules: [audit rules.yaml]\nmlperf_dirs: [ml perf]\nmlperf_ruleset: 4.1.0\n")
    run_cli("pipeline", "dvc", "--config", "config/extra.yaml", cwd=project, check=True)
    report = yaml.safe_load((project / "dvc.yaml").read_text())["stages"]["report"]
    words = shlex.split(report["cmd"])
    at = words.index("--submissions")
    assert words[at + 1 : at + 8] == ["results/submissions", "audited", "--mlperf", "ml perf", "--mlperf-ruleset", "4.1.0", "--rules"]
    assert words[at + 8] == "audit rules.yaml"
    # a changed submission, MLPerf result or rule reruns the report
    assert {"audited", "audit rules.yaml", "results/submissions", "ml perf"} <= set(report["deps"])


def test_every_entry_file_writes_out_what_the_flops_stage_reads():
    """DVC fails on a listed param missing from its file."""
    keys = [*FLOPS_KEYS, *(f"hyperparameters.{k}" for k in FLOPS_HYPERPARAMETERS)]
    for path in sorted((ROOT / "config/entries").rglob("*.yaml")):
        doc = yaml.safe_load(path.read_text(encoding="utf-8"))
        if "program" in doc:  # none of these: with a program entry, the stage reads every entry's whole file
            continue
        for key in keys:
            try:
                lookup(doc, key)
            except AssertionError as e:
                pytest.fail(f"{path.relative_to(ROOT)}: {e}")


# ------------------------------------------------ argument forms the commands accept


def test_optional_int_reads_null_as_unset():
    assert optional_int("None") is None
    assert optional_int("null") is None
    assert optional_int("3000") == 3000
    for bad in ("0", "-5", "3.5", "many"):
        with pytest.raises(argparse.ArgumentTypeError):
            optional_int(bad)


def test_boolean_reads_both_spellings():
    assert boolean("true") is True and boolean("True") is True
    assert boolean("false") is False and boolean("False") is False
    with pytest.raises(argparse.ArgumentTypeError):
        boolean("maybe")


def _train_args(*extra: str):
    from dawnpipe.train import cli

    parser = argparse.ArgumentParser()
    cli.configure(parser)
    base = ["--entry", str(ROOT / "config/entries/fastnet.yaml"), "--seed", "1", "--data", "data/prepared", "--tsv", "t"]
    base += ["--log-parquet", "p", "--checkpoint", "c", "--run-json", "r"]
    return cli.settings_from_args(parser.parse_args([*base, *extra]))


def test_train_settings_are_the_same_in_either_argument_form():
    flags = _train_args("--threshold", "70.0", "--train-limit", "3000", "--test-limit", "500", "--stop-at-threshold")
    values = _train_args("--train-limit", "3000", "--test-limit", "500", "--stop-at-threshold", "true", "--fashion-mnist", "70.0")
    assert values == flags
    assert values["threshold"] == 70.0 and values["demo_threshold"] and values["stop_at_threshold"]
    official = _train_args()
    assert _train_args("--train-limit", "None", "--test-limit", "None", "--stop-at-threshold", "false") == official
    assert official["threshold"] == all_tasks()["fashion-mnist"].threshold and not official["stop_at_threshold"]


def test_a_threshold_for_another_task_does_not_apply():
    assert _train_args("--cifar10", "80", "--fashion-mnist", "71")["threshold"] == 71.0
    assert _train_args("--cifar10", "80")["threshold"] == all_tasks()["fashion-mnist"].threshold
    assert _train_args("--threshold", "72", "--fashion-mnist", "71")["threshold"] == 72.0


def test_fetch_takes_its_own_task_source():
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
    with pytest.raises(DawnpipeError, match=r"prepared.*no prepared data for task cifar10.*prepared/cifar10/manifest.json"):
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
