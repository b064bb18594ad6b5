"""Hostile and careless input at the edges of the error contract: each class
gets the exact exit code and one line naming the file and the field (or the
argument), never a traceback, never "internal error"."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest
import yaml
from conftest import ROOT, run_cli, train_command
from test_cli_errors import write_run

from dawnpipe import crash
from dawnpipe.cli import run_command
from dawnpipe.pipeline.values import train_settings


def one_error_line(proc, code: int = 1) -> str:
    assert proc.returncode == code and "Traceback" not in proc.stderr and "internal error" not in proc.stderr, proc.stderr
    (line,) = [x for x in proc.stderr.splitlines() if "error" in x]
    return line


def test_a_price_given_as_true_is_named(tmp_path):
    run_dir = write_run(tmp_path / "r", [80.0, 91.0], threshold=90.0)
    prices = tmp_path / "prices.yaml"
    doc = yaml.safe_load((ROOT / "config/prices.yaml").read_text())
    doc["hardware"]["aws-p3.2xlarge"]["usd_per_hour"] = True
    prices.write_text(yaml.safe_dump(doc))
    args = ["extract", "--tsv", str(run_dir / "train.tsv"), "--log-parquet", str(run_dir / "train.parquet")]
    proc = run_cli(*args, "--run-json", str(run_dir / "run.json"), "--prices", str(prices), "--out", str(tmp_path / "tta.json"))
    line = one_error_line(proc)
    assert line == f"dawnpipe extract: error: {prices}: field 'hardware.aws-p3.2xlarge.usd_per_hour': expected a number or null, got bool True"
    assert not (tmp_path / "tta.json").exists()


@pytest.mark.parametrize("value", ["nan", "inf", "-3", "0", "high"])
def test_a_threshold_that_is_no_number_is_a_usage_error(tmp_path, value):
    proc = run_cli("sensitivity", "--tsv", "t.tsv", "--run-json", "r.json", "--out", str(tmp_path / "s.json"), "--ladder", "90", value)
    assert proc.returncode == 2 and "Traceback" not in proc.stderr
    assert "argument --ladder: expected a" in proc.stderr and repr(value) in proc.stderr


def test_a_deeply_nested_predictions_file_for_squad_eval_is_named(tmp_path):
    data = tmp_path / "dev.json"
    data.write_text(json.dumps({"version": "1.1", "data": []}))
    deep = tmp_path / "predictions.json"
    deep.write_text("[" * 50000 + "]" * 50000)
    line = one_error_line(run_cli("squad-eval", str(data), str(deep)))
    assert line.startswith(f"dawnpipe squad-eval: error: {deep}: nested")
    huge = tmp_path / "huge.json"
    huge.write_text('{"q1": "' + "x" * (65 << 20) + '"}')
    line = one_error_line(run_cli("squad-eval", str(data), str(huge)))
    assert line.startswith(f"dawnpipe squad-eval: error: {huge}: ") and "over the 67,108,864-byte cap" in line


@pytest.mark.parametrize(
    "model, args, field, says",
    [
        ("resnet20", {"block": "bottle"}, "model_args.block", "expected one of basic, bottleneck, got str 'bottle'"),
        ("resnet20", {"width": 0}, "model_args.width", "expected a number >= 1, got int 0"),
        ("resnet20", {"width": -3}, "model_args.width", "expected a number >= 1, got int -3"),
        ("fastnet", {"widths": [32, 64]}, "model_args.widths", "expected at least 4 items"),
        ("fastnet", {"head_scale": "x"}, "model_args.head_scale", "expected a number, got str 'x'"),
        ("fastnet", {"widht": 3}, "model_args", "unknown key 'widht'"),
    ],
)
def test_a_misspelt_model_args_value_is_named_before_anything_runs(tmp_path, model, args, field, says):
    entry = yaml.safe_load((ROOT / "config/entries/fastnet.yaml").read_text())
    entry |= {"model": model, "model_args": args}
    path = tmp_path / "bad.yaml"
    path.write_text(yaml.safe_dump(entry))
    proc = run_cli("flops", "--entry", str(path), "--data", str(tmp_path), "--out", str(tmp_path / "f.json"))
    line = one_error_line(proc)
    assert line.startswith(f"dawnpipe flops: error: {path}: field '{field}': {says}")


def run_dir_copy(tmp_path: Path) -> Path:
    """A complete run directory, hand-made like a real one (write_run + the files the report reads)."""
    run_dir = write_run(tmp_path / "runs" / "e" / "seed0", [80.0, 91.0], threshold=90.0)
    run = json.loads((run_dir / "run.json").read_text())
    run |= {"finished": "2026-01-01T00:00:00+00:00", "config_hash": "x", "environment": {"threads": 1, "cpu_model": "cpu", "git": {}}}
    (run_dir / "run.json").write_text(json.dumps(run))
    proc = run_cli(
        "extract",
        "--tsv",
        str(run_dir / "train.tsv"),
        "--log-parquet",
        str(run_dir / "train.parquet"),
        "--run-json",
        str(run_dir / "run.json"),
        "--prices",
        str(ROOT / "config/prices.yaml"),
        "--out",
        str(run_dir / "time_to_accuracy.json"),
        check=True,
    )
    assert proc.returncode == 0
    return run_dir


@pytest.mark.parametrize(
    "file, change, field, says",
    [
        ("time_to_accuracy.json", {"time_to_accuracy_hours": "0.02"}, "time_to_accuracy_hours", "expected a number or null, got str '0.02'"),
        ("time_to_accuracy.json", {"reached": None}, "reached", "expected true or false, got null"),
        ("run.json", {"seed": "zero"}, "seed", "expected a whole number, got str 'zero'"),
        ("run.json", {"finished": None}, "finished", "expected a string, got null"),
    ],
)
def test_a_run_file_with_a_bad_field_is_named_by_the_leaderboard(tmp_path, file, change, field, says):
    run_dir = run_dir_copy(tmp_path)
    doc = json.loads((run_dir / file).read_text())
    (run_dir / file).write_text(json.dumps(doc | change))
    subs = tmp_path / "subs"
    (subs / "CIFAR10" / "train").mkdir(parents=True)
    proc = run_cli("leaderboard", "--submissions", str(subs), "--runs", str(tmp_path / "runs"), "--json", str(tmp_path / "lb.json"))
    line = one_error_line(proc)
    assert line == f"dawnpipe leaderboard: error: {run_dir / file}: field '{field}': {says}"
    missing = {k: v for k, v in doc.items() if k != field}
    (run_dir / file).write_text(json.dumps(missing))
    line = one_error_line(run_cli("leaderboard", "--submissions", str(subs), "--runs", str(tmp_path / "runs"), "--json", str(tmp_path / "lb.json")))
    assert line.startswith(f"dawnpipe leaderboard: error: {run_dir / file}: field '{field}': missing")
    assert not (tmp_path / "lb.json").exists()


def test_a_missing_package_is_one_line_saying_how_to_install_it(capsys):
    def needs_onnxruntime(_):
        raise ModuleNotFoundError("No module named 'onnxruntime'", name="onnxruntime")

    assert run_command("infer", needs_onnxruntime, None) == 1
    err = capsys.readouterr().err
    assert err.splitlines() == [
        "dawnpipe infer: error: the Python package providing 'onnxruntime' is not installed in this environment; "
        "`make setup` installs every package dawnpipe uses (or: pip install -r requirements.txt -c constraints.txt)"
    ]


def test_a_crash_report_that_cannot_be_written_is_still_one_line(tmp_path, monkeypatch, capsys):
    nowhere = tmp_path / "no-such-dir"
    monkeypatch.setattr(crash.tempfile, "tempdir", str(nowhere))

    def bug(_):
        raise KeyError("oops")

    assert run_command("report", bug, None) == 70
    (line,) = capsys.readouterr().err.splitlines()
    assert line.startswith("dawnpipe report: internal error: KeyError: 'oops' (a bug in dawnpipe; please report it with no crash report: writing one in")
    assert str(nowhere) in line


def test_escape_sequences_in_a_submission_reach_the_terminal_escaped(tmp_path):
    """JSON keys, TSV headers and file names of a submission are printed with
    their control characters escaped: they cannot rewrite the auditor's output."""
    from submission_factory import CIFAR_TSV, train_meta, write

    name = "team_x\x1b[2Jevil_1v100_pytorch"
    write(tmp_path, f"CIFAR10/train/{name}.json", {**train_meta(), "bad\x1b[31mkey": 1})
    write(tmp_path, f"CIFAR10/train/{name}.tsv", CIFAR_TSV.replace("epoch", "epoch\x1b]0;pwned\x07", 1))
    proc = run_cli("audit", str(tmp_path))
    assert proc.returncode == 1 and "Traceback" not in proc.stderr
    assert "\x1b" not in proc.stdout and "\x07" not in proc.stdout
    assert "bad\\x1b[31mkey" in proc.stdout and "team_x\\x1b[2Jevil" in proc.stdout and "\\x1b]0;pwned\\x07" in proc.stdout
    shutil.rmtree(tmp_path / "CIFAR10")


def utilization_args(run_dir: Path, flops: Path, log: Path | None = None) -> list[str]:
    args = ["utilization", "--log-parquet", str(log or run_dir / "train.parquet"), "--run-json", str(run_dir / "run.json")]
    return [*args, "--flops", str(flops), "--out", str(run_dir / "utilization.json")]


@pytest.fixture(scope="module")
def real_run(tmp_path_factory, prepared_fashion_mnist):
    """A real tiny training run (one epoch: its train.parquet, run.json) and its entry's FLOP count."""
    from tiny_training import TINY_ENTRY, train_args, write_entry

    root = tmp_path_factory.mktemp("real-run")
    entry = write_entry(root / "tiny.yaml", hyperparameters={**TINY_ENTRY["hyperparameters"], "epochs": 1})
    run_cli(*train_args(entry, prepared_fashion_mnist, root / "run", extra=("--threshold", "1")), check=True)  # reached: extract reads the Parquet log
    run_cli("flops", "--entry", str(entry), "--data", str(prepared_fashion_mnist), "--out", str(root / "flops.json"), check=True)
    return root


@pytest.mark.slow
@pytest.mark.parametrize(
    "change, field, says",
    [
        ({"flops_per_item": "25886976"}, "flops_per_item", "expected a number, got str '25886976'"),
        ({"counted": "yes"}, "counted", "expected true or false, got str 'yes'"),
        ({"counted": None}, "counted", "expected true or false, got null"),
    ],
)
def test_a_flops_file_with_a_bad_field_is_named_by_the_utilization_stage(real_run, tmp_path, change, field, says):
    doc = json.loads((real_run / "flops.json").read_text())
    bad = tmp_path / "flops.json"
    bad.write_text(json.dumps(doc | change))
    line = one_error_line(run_cli(*utilization_args(real_run / "run", bad)))
    assert line == f"dawnpipe utilization: error: {bad}: field '{field}': {says}"
    bad.write_text(json.dumps({k: v for k, v in doc.items() if k != "flops_per_item"}))  # counted, but no count
    line = one_error_line(run_cli(*utilization_args(real_run / "run", bad)))
    assert line.startswith(f"dawnpipe utilization: error: {bad}: field 'flops_per_item': missing")
    assert not (real_run / "run" / "utilization.json").exists()


@pytest.mark.slow
@pytest.mark.parametrize(
    "drop, field",
    [
        (("settings",), "settings"),
        (("environment",), "environment"),
        (("settings", "entry", "hyperparameters", "precision"), "settings.entry.hyperparameters.precision"),
    ],
)
def test_a_run_json_without_what_the_utilization_stage_reads_is_named(real_run, tmp_path, drop, field):
    """The utilization stage compares a run with the peak of its own
    arithmetic (settings' precision) on its device (environment): a run.json
    without them is one line naming the field, not a KeyError (exit 70)."""
    doc = json.loads((real_run / "run" / "run.json").read_text())
    node = doc
    for key in drop[:-1]:
        node = node[key]
    del node[drop[-1]]
    run_dir = tmp_path / "run"
    run_dir.mkdir()
    (run_dir / "run.json").write_text(json.dumps(doc))
    args = ["utilization", "--log-parquet", str(real_run / "run" / "train.parquet"), "--run-json", str(run_dir / "run.json")]
    proc = run_cli(*args, "--flops", str(real_run / "flops.json"), "--out", str(run_dir / "utilization.json"))
    line = one_error_line(proc)
    assert proc.returncode == 1
    assert line.startswith(f"dawnpipe utilization: error: {run_dir / 'run.json'}: field '{field}': missing"), line
    assert not (run_dir / "utilization.json").exists()


@pytest.mark.slow
@pytest.mark.parametrize(
    "column, change, says",
    [
        ("items_per_second", None, "missing column(s) items_per_second"),
        ("epoch_train_seconds", "12", "column epoch_train_seconds"),
        ("wall_hours", None, "missing column(s) wall_hours"),
        ("held_out_top1Accuracy", "91.5", "column held_out_top1Accuracy: expected numbers, got "),
        ("new_test_top1Accuracy", True, "column new_test_top1Accuracy: expected numbers, got bool"),
    ],
)
def test_a_parquet_log_with_a_missing_or_mistyped_column_is_named(real_run, tmp_path, column, change, says):
    import pandas as pd

    log = pd.read_parquet(real_run / "run" / "train.parquet")
    log = log.drop(columns=[column]) if change is None else log.assign(**{column: change})
    bad = tmp_path / "train.parquet"
    log.to_parquet(bad, index=False)
    line = one_error_line(run_cli(*utilization_args(real_run / "run", real_run / "flops.json", bad)))
    assert line.startswith(f"dawnpipe utilization: error: {bad}: {says}"), line
    if column == "wall_hours":  # extract reads the wall clock of the threshold epoch from it
        args = ["extract", "--tsv", str(real_run / "run" / "train.tsv"), "--log-parquet", str(bad), "--run-json", str(real_run / "run" / "run.json")]
        line = one_error_line(run_cli(*args, "--prices", str(ROOT / "config/prices.yaml"), "--out", str(tmp_path / "tta.json")))
        assert line.startswith(f"dawnpipe extract: error: {bad}: missing column(s) wall_hours"), line
    bad.write_bytes(b"PAR1 not really")
    line = one_error_line(run_cli(*utilization_args(real_run / "run", real_run / "flops.json", bad)))
    assert line.startswith(f"dawnpipe utilization: error: {bad}: not a readable Parquet file"), line


@pytest.mark.parametrize("script", ["bench/overhead.py", "bench/telemetry_overhead.py"])
def test_the_bench_scripts_read_their_entry_checked_in_one_line(tmp_path, script):
    """The overhead benchmarks take an entry file: read bounded and checked
    before anything runs, its problems one line naming it and the field (a
    TypeError traceback before), as the pipeline's own commands do."""
    import subprocess
    import sys

    from conftest import tool_env

    bad = tmp_path / "entry.yaml"
    bad.write_text(yaml.safe_dump({**yaml.safe_load((ROOT / "config/entries/fastnet.yaml").read_text()), "hyperparameters": 3}))
    proc = subprocess.run([sys.executable, str(ROOT / script), "--entry", str(bad)], capture_output=True, text=True, env=tool_env(), timeout=300)
    line = one_error_line(proc)
    assert line.startswith(f"{script.removesuffix('.py')}: error: {bad}: field 'hyperparameters': expected a mapping"), line
    deep = tmp_path / "deep.yaml"
    deep.write_text("a: " + "[" * 200 + "]" * 200)
    line = one_error_line(
        subprocess.run([sys.executable, str(ROOT / script), "--entry", str(deep)], capture_output=True, text=True, env=tool_env(), timeout=300)
    )
    assert line == f"{script.removesuffix('.py')}: error: {deep}: nested deeper than 64 levels; not read"


@pytest.mark.parametrize("command", ["extract", "sensitivity"])
def test_a_whole_number_beyond_what_a_float_holds_is_named(tmp_path, command):
    """JSON has no limit on whole numbers; Python reads 10**400 as one, and the
    first float() of it raised OverflowError (exit 70). The bounded reader
    refuses whole numbers beyond 64 bits (numpy and Parquet cannot hold them),
    naming the file and the field."""
    run_dir = write_run(tmp_path / "r", [80.0, 91.0], threshold=90.0)
    run_json = run_dir / "run.json"
    run_json.write_text(run_json.read_text().replace('"threshold": 90.0', '"threshold": 1' + "0" * 400))
    args = {
        "extract": ["--log-parquet", str(run_dir / "train.parquet"), "--prices", str(ROOT / "config/prices.yaml")],
        "sensitivity": [],
    }[command]
    proc = run_cli(command, "--tsv", str(run_dir / "train.tsv"), "--run-json", str(run_json), *args, "--out", str(tmp_path / "out.json"))
    line = one_error_line(proc)
    assert line == f"dawnpipe {command}: error: {run_json}: field 'threshold': a whole number beyond 64 bits (1000000000...); not read"
    assert not (tmp_path / "out.json").exists()


def test_a_file_time_in_nanoseconds_is_read(tmp_path):
    """fetch.json records a file's modification time in nanoseconds since 1970
    (about 2**61); a cap at 2**53 refused dawnpipe's own file (prepare imagenet
    stopped). The cap is the int64 range: 2**63-1 reads, 2**63 does not."""
    from dawnpipe.errors import DawnpipeError
    from dawnpipe.fileio import read_json

    path = tmp_path / "fetch.json"
    path.write_text(json.dumps({"files": {"a.tar": {"mtime_ns": 1795638184123456789, "max": 2**63 - 1}}}))
    assert read_json(path)["files"]["a.tar"]["mtime_ns"] == 1795638184123456789
    path.write_text(json.dumps({"files": {"a.tar": {"mtime_ns": 2**63}}}))
    with pytest.raises(DawnpipeError, match=r"field 'files\.a\.tar\.mtime_ns': a whole number beyond 64 bits"):
        read_json(path)


@pytest.mark.parametrize("value", ["-1", str(2**32), "1" + "0" * 30, "0.5"])
def test_a_seed_no_generator_takes_is_a_usage_error(tmp_path, value):
    """A seed is a whole number 0..2**32-1 (numpy's and Keras' range; run.json
    requires >= 0): -1 trained a run every later stage refused, and a seed of
    10**30 stopped with exit 70 in torch.manual_seed."""
    proc = run_cli(*train_command(ROOT / "config/entries/fastnet.yaml", tmp_path, tmp_path, seed=value, settings=train_settings(90)))
    line = one_error_line(proc, code=2)
    assert line == f"dawnpipe train: error: argument --seed: expected a whole number from 0 to 4294967295, got {value!r}"


@pytest.mark.parametrize("text", ["config: [1]\nconfig_files: [config/config.yaml]\n", "config_files: [config/config.yaml]\nconfig: &a [*a]\n", "[1, 2]\n"])
def test_a_hand_edited_params_yaml_is_named_by_the_dvc_check(tmp_path, text):
    """`dawnpipe pipeline dvc --check` says how params.yaml differs from what
    it would write; a params.yaml whose recorded config is not a mapping (or
    not YAML it can read) stopped it with exit 70 (AttributeError)."""
    from conftest import copy_project

    proj = copy_project(tmp_path / "proj")
    (proj / "params.yaml").write_text(text)
    proc = run_cli("pipeline", "dvc", "--check", "--config", "config/test.yaml", cwd=proj)
    line = one_error_line(proc)
    assert line.startswith("dawnpipe pipeline: error: dvc.yaml and params.yaml out of date with config/config.yaml + config/test.yaml (params.yaml"), line


@pytest.mark.parametrize(
    "change, says",
    [
        ({"drop": "hours"}, "missing column(s) hours"),
        ({"top1Accuracy": "high"}, "column top1Accuracy"),
        ({"epoch_train_seconds": "12"}, "column epoch_train_seconds"),
        ({"bytes": b"PAR1 not really"}, "not a readable Parquet file"),
    ],
)
def test_a_malformed_parquet_log_is_named_by_the_report_and_the_study_summary(tmp_path, change, says):
    """The leaderboard (``--runs``) and a study's summary read every run's
    train.parquet through the same check as the extract and utilization
    stages (dawnpipe.logs.read_run_parquet): a log with a column missing or
    of the wrong type, or no Parquet at all, is one line naming the file and
    the column; it was a KeyError or a ValueError (exit 70) or, for a log
    without the wall clock, accepted."""
    import pandas as pd
    from submission_factory import run_dir

    run = run_dir(tmp_path / "results", "smoke-fastnet", 0)
    log = tmp_path / "results/runs/smoke-fastnet/seed0/train.parquet"
    if "bytes" in change:
        log.write_bytes(change["bytes"])
    else:
        frame = pd.read_parquet(log)
        frame = frame.drop(columns=[change["drop"]]) if "drop" in change else frame.assign(**change)
        frame.to_parquet(log, index=False)
    proc = run_cli("leaderboard", "--runs", str(run), "--json", str(tmp_path / "lb.json"))
    assert one_error_line(proc).startswith(f"dawnpipe leaderboard: error: {log}: {says}"), proc.stderr
    assert not (tmp_path / "lb.json").exists()
    study = tmp_path / "study.yaml"
    study.write_text(
        yaml.safe_dump(
            {"base": "smoke-fastnet", "seeds": [0], "ladder": [70.0], "design": "lesion", "tricks": {"nesterov": {"hyperparameters.nesterov": False}}}
        )
    )
    args = ["study", "summarize", "--study", str(study), "--entries-dir", str(ROOT / "config/entries/smoke"), "--runs", str(tmp_path / "results/runs")]
    proc = run_cli(*args, "--json", str(tmp_path / "s.json"), "--html", str(tmp_path / "s.html"))
    assert one_error_line(proc).startswith(f"dawnpipe study: error: {log}: {says}"), proc.stderr
    assert not (tmp_path / "s.json").exists()


EVIL = "evil\x1b[2J\x1b]0;pwned\x07"  # clears the screen and retitles the terminal when printed raw
EVIL_SHOWN = "evil\\x1b[2J\\x1b]0;pwned\\x07"  # terminal_safe's escapes, written out by hand


def shown_escaped(proc) -> str:
    """The command's whole terminal output, checked to hold no control character but its line ends."""
    out = proc.stdout + proc.stderr
    assert proc.returncode == 0, proc.stderr
    assert not [c for c in out if (ord(c) < 0x20 and c not in "\n\t") or 0x7F <= ord(c) < 0xA0], out
    return out


def test_text_of_a_runs_files_reaches_the_terminal_escaped(tmp_path):
    """run.json, flops.json and a checkpoint's run reach a user through dvc
    pull or a colleague: the entry (and a device name, a reason) they hold is
    printed by the extract, sensitivity, utilization and infer stages with
    its control characters escaped, like the auditor's output."""
    import pandas as pd
    from infer_fixtures import make_checkpoint, make_prepared, make_run_json, random_items

    env = {"threads": 2, "cpu_model": f"cpu {EVIL}", "device": "cpu"}
    settings = {"entry": {"hyperparameters": {"precision": "fp32"}}}
    run_dir = write_run(tmp_path / "run", [80.0, 91.0], threshold=90.0, entry=EVIL, environment=env, settings=settings)
    args = ["--tsv", str(run_dir / "train.tsv"), "--run-json", str(run_dir / "run.json")]
    out = shown_escaped(
        run_cli(
            "extract", *args, "--log-parquet", str(run_dir / "train.parquet"), "--prices", str(ROOT / "config/prices.yaml"), "--out", str(tmp_path / "tta.json")
        )
    )
    assert out.startswith(f"extract: {EVIL_SHOWN} seed 0: reached at epoch 2")
    out = shown_escaped(run_cli("sensitivity", *args, "--ladder", "85", "--out", str(tmp_path / "s.json")))
    assert out.startswith(f"sensitivity: {EVIL_SHOWN} seed 0: 85: 72.0 s (epoch 2)")

    log = pd.read_parquet(run_dir / "train.parquet").assign(eval_seconds=1.0, epoch_train_seconds=36.0, items_per_second=1000.0)
    log.to_parquet(run_dir / "train.parquet", index=False)
    flops = tmp_path / "flops.json"
    flops.write_text(json.dumps({"entry": EVIL, "counted": False, "reason": f"not counted: {EVIL}"}))
    out = shown_escaped(run_cli(*utilization_args(run_dir, flops)))
    assert out.startswith(f"utilization: {EVIL_SHOWN} seed 0: FLOPs not counted (not counted: {EVIL_SHOWN})"), out

    images, labels = random_items(40, seed=3)
    data = make_prepared(tmp_path / "prepared", images, labels)
    run_json = make_run_json(tmp_path / "infer" / "run.json", threshold=1.0, entry=EVIL)
    proc = run_cli(
        "infer",
        "--backend",
        "eager",
        "--checkpoint",
        str(make_checkpoint(tmp_path / "model.pt", epoch=4, reached=True)),
        "--run-json",
        str(run_json),
        "--data",
        str(data),
        "--prices",
        str(ROOT / "config/prices.yaml"),
        "--out",
        str(tmp_path / "infer" / "eager.json"),
        "--items-parquet",
        str(tmp_path / "infer" / "eager.parquet"),
        "--warmup",
        "2",
        "--throughput-batches",
        "1",
        "--throughput-seconds",
        "0.05",
    )
    out = shown_escaped(proc)
    lines = [line for line in out.splitlines() if line.startswith("infer: ")]
    assert lines and all(line.startswith(f"infer: {EVIL_SHOWN} seed 0") or line.startswith("infer: eager ready") for line in lines), lines
    assert f"infer {EVIL_SHOWN} s0 eager" in out  # the progress line


def test_question_ids_of_a_downloaded_squad_file_reach_the_terminal_escaped(tmp_path):
    """prepare squad names an example question whose answer is not where its
    answer_start says, and one whose answer covers no token: their ids are the
    downloaded file's text, printed with control characters escaped."""
    from squad_synth import write_squad_files

    raw = tmp_path / "raw"
    paths = write_squad_files(raw)
    for path in paths.values():
        doc = json.loads(path.read_text())
        qas = doc["data"][0]["paragraphs"][0]["qas"]
        context = doc["data"][0]["paragraphs"][0]["context"]
        qas[0]["id"], qas[0]["answers"][0]["answer_start"] = f"moved-{EVIL}", qas[0]["answers"][0]["answer_start"] + 1
        space = context.index(" ")
        qas[1]["id"], qas[1]["answers"] = f"space-{EVIL}", [{"text": " ", "answer_start": space}]
        path.write_text(json.dumps(doc))
    (raw / "fetch.json").write_text(json.dumps({"task": "squad", "files": {}}))
    out = shown_escaped(run_cli("prepare", "squad", "--raw", str(raw), "--out", str(tmp_path / "prepared")))
    for path in paths.values():
        assert f"prepare: note: {path}: 1 questions whose first answer is not at its answer_start (e.g. id moved-{EVIL_SHOWN})" in out, out
        assert f"prepare: note: {path}: 1 answers cover no token (e.g. id space-{EVIL_SHOWN})" in out, out


def test_the_new_test_sets_title_from_a_manifest_reaches_the_runs_first_line_escaped():
    """The train stage's first line names the new test set as the prepared
    data's manifest.json does (a directory from dvc pull): escaped."""
    from dawnpipe.logs import NEW_TEST_PREFIX
    from dawnpipe.train.logbook import extra_set_text

    text = extra_set_text([(NEW_TEST_PREFIX, 2000, {"title": f"CIFAR-10.1 {EVIL}", "verified": False})])
    assert text == f", 2000 items of CIFAR-10.1 {EVIL_SHOWN} (NOT VERIFIED: no checksum of its files is known)"
