"""Layered configuration (dawnpipe.pipeline.config): a config file states only
what it changes from config/config.yaml, a group of settings merges key by
key, a per-task table and a list are replaced whole, and every bad value is
one line naming the file and the field, from `dawnpipe pipeline config` and
from Snakemake alike, before any job."""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest
import yaml
from conftest import ROOT, run_cli, run_snakemake

from dawnpipe.errors import DawnpipeError
from dawnpipe.pipeline.config import resolve


def project(tmp_path: Path) -> Path:
    dest = tmp_path / "project"
    dest.mkdir()
    for part in ("Snakefile", "workflow", "config", "src", "scripts", "profiles", "envs"):
        src = ROOT / part
        (shutil.copytree(src, dest / part, ignore=shutil.ignore_patterns("__pycache__")) if src.is_dir() else shutil.copy2(src, dest / part))
    return dest


def test_the_test_config_is_the_default_with_its_own_changes():
    config = resolve(["config/test.yaml"], root=ROOT)
    assert config.files == ("config/config.yaml", "config/test.yaml")
    v = config.values
    # from config/config.yaml
    assert v["inference"]["threads"] == 1
    # its own: the default's zoo entries without its program entry (tests/test_program_workflow.py runs programs)
    assert v["entries"] == ["fastnet", "resnet20-dawn"]
    assert v["name"] == "test" and v["seeds"] == [0, 1] and v["train_limit"] == 3000 and v["test_limit"] == 500
    assert v["inference"]["warmup"] == 10 and v["inference"]["backends"] == ["eager", "onnxruntime", "tf-function"]
    assert v["thresholds"] == {"fashion-mnist": 50.0} and v["sensitivity_ladders"] == {"fashion-mnist": [35.0, 40.0, 45.0]}
    # a group merges key by key: its own probe length beside the schema's interval
    assert v["telemetry"] == {"interval_s": 1.0, "cpu_peak_probe_s": 0.1}
    # the schema's defaults, which neither file states
    assert v["prices"] == "config/prices.yaml" and v["submission_dirs"] == ["results/submissions"]
    assert config.where("seeds") == "config/test.yaml" and config.where("entries") == "config/test.yaml"
    assert config.where("prices").endswith("(default)")


def test_a_per_task_table_is_replaced_whole_and_a_group_merged(tmp_path):
    (tmp_path / "official.yaml").write_text("thresholds: {}\ninference: {backends: [eager]}\n")
    v = resolve([tmp_path / "official.yaml"], root=ROOT).values
    assert v["thresholds"] == {}  # the official thresholds, not the default's demo 88%
    assert v["inference"] == {"threads": 1, "warmup": 50, "throughput_batches": [1, 8, 64, 256], "throughput_seconds": 1.0, "backends": ["eager"]}


def test_layers_apply_in_order_and_overrides_last(tmp_path):
    (tmp_path / "a.yaml").write_text("seeds: [1]\nname: a\n")
    (tmp_path / "b.yaml").write_text("seeds: [2, 3]\n")
    config = resolve([tmp_path / "a.yaml", tmp_path / "b.yaml"], {"name": "cli"}, root=ROOT)
    assert config.values["seeds"] == [2, 3] and config.values["name"] == "cli" and config.where("name") == "--config"


@pytest.mark.parametrize(
    "text, message",
    [
        ("seedz: [0]\n", "field '(top level)': unknown key 'seedz'"),
        ("inference: {warmpu: 3}\n", "field 'inference': unknown key 'warmpu' (known: threads, warmup, throughput_batches, throughput_seconds, backends)"),
        ("train_limit: true\n", "field 'train_limit': expected a whole number or null, got bool True"),
        ("seeds: [0, 0.5]\n", "field 'seeds.1': expected a whole number, got float 0.5"),
        ("thresholds: {fashion-mnist: .nan}\n", "field 'thresholds.fashion-mnist': not a finite number (NaN or infinity)"),
        ("thresholds: {fashion-mnist: true}\n", "field 'thresholds.fashion-mnist': expected a number, got bool True"),
        ("telemetry: {interval_s: -1}\n", "field 'telemetry.interval_s': expected a number >= 0, got int -1"),
        ("- a list\n", "expected a mapping of config keys, got list ['a list']"),
        ("name: [unclosed\n", "not valid YAML"),
    ],
)
def test_a_bad_layer_is_named_with_its_field(tmp_path, text, message):
    bad = tmp_path / "bad.yaml"
    bad.write_text(text)
    with pytest.raises(DawnpipeError) as raised:
        resolve([bad], root=ROOT)
    assert str(raised.value).startswith(f"{bad}: ") and message in str(raised.value)


def test_a_seed_train_cannot_take_is_refused_by_the_config_not_the_train_job(tmp_path):
    """train --seed takes 0 .. 2**32 - 1 (numpy's and Keras' range); a larger seed in a
    config is one line naming the file and the field before any job, the largest is kept."""
    largest = 2**32 - 1
    proj = project(tmp_path)
    (proj / "config/seeds.yaml").write_text(f"seeds: [0, {largest}]\n")
    proc = run_cli("pipeline", "config", "--config", "config/seeds.yaml", cwd=proj, check=True)
    assert yaml.safe_load(proc.stdout)["seeds"] == [0, 4294967295]
    (proj / "config/seeds.yaml").write_text(f"seeds: [0, {largest + 1}]\n")
    proc = run_cli("pipeline", "config", "--config", "config/seeds.yaml", cwd=proj)
    assert proc.returncode == 1 and proc.stdout == ""
    assert proc.stderr.splitlines() == ["dawnpipe pipeline: error: config/seeds.yaml: field 'seeds.1': expected a number <= 4294967295, got int 4294967296"]


def test_a_misspelt_task_under_thresholds_is_an_error_not_silence(tmp_path):
    proj = project(tmp_path)
    (proj / "config/typo.yaml").write_text("thresholds: {fashion-mnis: 70.0}\n")
    proc = run_cli("pipeline", "config", "--config", "config/typo.yaml", cwd=proj)
    assert proc.returncode == 1 and proc.stdout == ""
    assert proc.stderr.splitlines() == [
        "dawnpipe pipeline: error: config/typo.yaml: field 'thresholds.fashion-mnis': unknown task 'fashion-mnis' (known: cifar10, fashion-mnist, imagenet, squad)"
    ]


def test_pipeline_config_prints_the_resolved_configuration(tmp_path):
    proj = project(tmp_path)
    proc = run_cli("pipeline", "config", "--config", "config/benchmark.yaml", cwd=proj, check=True)
    printed = yaml.safe_load(proc.stdout)
    assert printed == resolve(["config/benchmark.yaml"], root=ROOT).values
    assert printed["thresholds"] == {} and printed["seeds"] == [0, 1, 2] and printed["inference"]["warmup"] == 50


@pytest.mark.slow
@pytest.mark.parametrize(
    "key, shown",
    [
        ("warmpu", "warmpu"),
        # a key carrying terminal escapes (a window title, a bell) is printed with them made visible
        ('"warm\\e]0;owned\\apu"', "warm\\x1b]0;owned\\x07pu"),
    ],
    ids=["typo", "terminal-escapes"],
)
def test_snakemake_stops_before_any_job_with_one_line_naming_the_file(tmp_path, key, shown):
    proj = project(tmp_path)
    (proj / "config/typo.yaml").write_text(f"inference: {{{key}: 3}}\n")
    proc = run_snakemake(proj, "-n", "results/leaderboard.html", "--configfile", "config/typo.yaml", check=False)
    assert proc.returncode == 1
    [line] = [line for line in proc.stderr.splitlines() if line.startswith("dawnpipe: error: ")]
    known = "(known: threads, warmup, throughput_batches, throughput_seconds, backends)"
    assert line == f"dawnpipe: error: config/typo.yaml: field 'inference': unknown key '{shown}' {known}"
    assert "Traceback" not in proc.stderr and "Job stats" not in proc.stdout
    assert "\x1b" not in proc.stderr and "\x07" not in proc.stderr


@pytest.mark.slow
def test_snakemake_lays_its_config_and_overrides_as_the_generator_does(tmp_path):
    proj = project(tmp_path)
    proc = run_snakemake(proj, "-n", "-p", "results/leaderboard.html", "--configfile", "config/test.yaml", "--config", "seeds=[3]")
    shells = [line for line in proc.stdout.splitlines() if line.startswith("Shell command:") and " train " in line]
    assert len(shells) == 2 and all("--seed 3 " in s and "--threshold 50.0 " in s and "--train-limit 3000 " in s for s in shells), shells
