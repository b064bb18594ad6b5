"""Bad input to the pipeline's own stages: one line naming the file and field,
a non-zero exit, never a traceback; outputs written over what stands at the
target path without destroying it. And the extract stage on a hand-made run."""

from __future__ import annotations

import json
import os
import tempfile
import threading
from pathlib import Path

import pandas as pd
import pytest
from conftest import ROOT, run_cli, train_command

from dawnpipe.cli import run_command
from dawnpipe.errors import DawnpipeError
from dawnpipe.fileio import write_json
from dawnpipe.metrics.extract import extract

PRICES = ROOT / "config" / "prices.yaml"


def write_run(run_dir: Path, accuracies: list[float], *, threshold: float = 90.0, nodes: int = 1, **run_overrides) -> Path:
    """A run directory as `dawnpipe train` leaves it: TSV, Parquet log, run.json.
    Epoch k ends after k x 0.01 training hours and k x 0.015 wall hours."""
    run_dir.mkdir(parents=True, exist_ok=True)
    epochs = list(range(1, len(accuracies) + 1))
    hours = [0.01 * e for e in epochs]
    pd.DataFrame({"epoch": epochs, "hours": hours, "top1Accuracy": accuracies}).to_csv(run_dir / "train.tsv", sep="\t", index=False)
    pd.DataFrame({"epoch": epochs, "hours": hours, "wall_hours": [0.015 * e for e in epochs], "top1Accuracy": accuracies}).to_parquet(
        run_dir / "train.parquet", index=False
    )
    run = {
        "entry": "e",
        "seed": 0,
        "task": "fashion-mnist",
        "model": "m",
        "framework": "pytorch",
        "hardware": "2 x aws-p3.2xlarge" if nodes > 1 else "aws-p3.2xlarge",
        "hardware_price_tag": "aws-p3.2xlarge",
        "nodes": nodes,
        "threshold": threshold,
        "official_threshold": 93.0,
        "demo_threshold": threshold != 93.0,
    }
    run.update(run_overrides)
    write_json(run_dir / "run.json", {k: v for k, v in run.items() if v is not None})
    return run_dir


def extract_dir(run_dir: Path) -> dict:
    return extract(run_dir / "train.tsv", run_dir / "train.parquet", run_dir / "run.json", PRICES)


def test_extract_time_cost_and_wall_clock_of_the_first_epoch_at_the_threshold(tmp_path):
    # 3.06 USD/h (aws-p3.2xlarge in config/prices.yaml); epoch 3 is the first at >= 90
    record = extract_dir(write_run(tmp_path, [80.0, 89.99, 90.0, 95.0]))
    assert record["reached"] and record["epochs_to_accuracy"] == 3
    assert record["time_to_accuracy_hours"] == pytest.approx(0.03)
    assert record["wall_time_to_accuracy_hours"] == pytest.approx(0.045)
    assert record["cost_usd"] == pytest.approx(0.03 * 3.06)
    assert record["demo_threshold"] is True and record["reason"] is None


def test_extract_prices_every_node_of_a_data_parallel_run(tmp_path):
    record = extract_dir(write_run(tmp_path, [91.0], nodes=2))
    assert record["usd_per_hour"] == pytest.approx(2 * 3.06)
    assert record["cost_usd"] == pytest.approx(0.01 * 2 * 3.06)


def test_extract_did_not_converge_says_the_best_and_the_demo_threshold(tmp_path):
    record = extract_dir(write_run(tmp_path, [80.0, 85.5]))
    assert not record["reached"] and record["time_to_accuracy_hours"] is None and record["cost_usd"] is None
    assert "85.50%" in record["reason"] and "90.00%" in record["reason"] and "2 epochs" in record["reason"]
    assert "demo threshold" in record["reason"]


def test_extract_official_threshold_is_not_called_a_demo(tmp_path):
    record = extract_dir(write_run(tmp_path, [80.0], threshold=93.0))
    assert "demo" not in record["reason"]


def test_extract_names_a_run_json_without_a_field(tmp_path):
    run_dir = write_run(tmp_path / "r", [91.0], threshold=None)
    proc = run_cli(
        "extract",
        "--tsv",
        str(run_dir / "train.tsv"),
        "--log-parquet",
        str(run_dir / "train.parquet"),
        "--run-json",
        str(run_dir / "run.json"),
        "--prices",
        str(PRICES),
        "--out",
        str(tmp_path / "tta.json"),
    )
    assert proc.returncode == 1, proc.stderr
    assert f"{run_dir / 'run.json'}: field 'threshold': missing" in proc.stderr
    assert "Traceback" not in proc.stderr and not (tmp_path / "tta.json").exists()


def test_stability_names_the_result_of_another_entry(tmp_path):
    ours, theirs = tmp_path / "a.json", tmp_path / "b.json"
    base = {"seed": 0, "task": "fashion-mnist", "threshold": 93.0, "demo_threshold": False, "reached": True, "time_to_accuracy_hours": 0.1}
    base |= {"wall_time_to_accuracy_hours": 0.11, "epochs_to_accuracy": 3, "cost_usd": 0.01, "usd_per_hour": 0.1, "best_metric": 93.5}
    base |= {"epochs_run": 3, "training_hours": 0.1, "reason": None}
    write_json(ours, {"entry": "fastnet", **base})
    write_json(theirs, {"entry": "resnet20-dawn", **base})
    proc = run_cli("stability", "--entry", "fastnet", "--out", str(tmp_path / "s.json"), str(ours), str(theirs))
    assert proc.returncode == 1 and proc.stderr.splitlines() == [
        f"dawnpipe stability: error: {theirs}: field entry is 'resnet20-dawn', not --entry fastnet: "
        "a result of another entry (or not a time-to-accuracy result)"
    ]
    assert not (tmp_path / "s.json").exists()
    # a result of the right entry with a field of the wrong type: named, not a crash in the arithmetic
    write_json(theirs, {**base, "entry": "fastnet", "time_to_accuracy_hours": "fast"})
    proc = run_cli("stability", "--entry", "fastnet", "--out", str(tmp_path / "s.json"), str(ours), str(theirs))
    assert proc.returncode == 1 and proc.stderr.splitlines() == [
        f"dawnpipe stability: error: {theirs}: field 'time_to_accuracy_hours': expected a number or null, got str 'fast'"
    ]


@pytest.mark.parametrize(
    "content, message",
    [
        (
            b"task: no-such-task\nframework: pytorch\nmodel: fastnet\nhardware: local-cpu\nhyperparameters: {batch_size: 8, epochs: 1, lr: 0.1}\n",
            "field 'task': unknown task 'no-such-task'",
        ),
        (b"task: fashion-mnist\nmodel: \xff\xfe\n", "not UTF-8 text"),
    ],
)
def test_bad_entry_files_are_named_with_the_reason(tmp_path, content, message):
    entry = tmp_path / "bad.yaml"
    entry.write_bytes(content)
    proc = run_cli(*train_command(entry, tmp_path, tmp_path, work_dir=tmp_path / "work"))
    assert proc.returncode == 1, proc.stderr
    assert f"{entry}: {message}" in proc.stderr
    assert "Traceback" not in proc.stderr


def test_a_bug_is_one_line_on_the_terminal_and_a_traceback_in_a_file(capsys, tmp_path, monkeypatch):
    def broken(args):
        return {}["no such key"]

    monkeypatch.setattr(tempfile, "tempdir", str(tmp_path))  # where the crash report goes: the system's temporary directory
    assert run_command("report", broken, None) == 70
    err = capsys.readouterr().err
    assert "Traceback" not in err and "internal error: KeyError" in err
    report = Path(err.rsplit("please report it with ", 1)[1].rstrip(")\n"))
    assert report.parent == tmp_path
    assert "Traceback" in report.read_text() and "no such key" in report.read_text()


def test_argparses_own_usage_error_prints_the_arguments_terminal_safe(tmp_path):
    """argparse writes "unrecognized arguments: ..." itself; a fuzzed ESC once
    reached the terminal raw this way (fresh clone of 00dfbf0, test_cli_fuzz[report])."""
    args = ("--runs", "r", "--json", "j", "--html", "h", "--table", "t", "--csv", "c", "a\x1bb")  # relative: in tmp_path, were any written
    proc = run_cli("report", *args, cwd=tmp_path)
    assert proc.returncode == 2 and "\x1b" not in proc.stderr, proc.stderr
    assert proc.stderr.splitlines()[-1] == "dawnpipe report: error: unrecognized arguments: a\\x1bb"


def test_an_os_error_is_one_line_naming_the_file(capsys):
    def full_disk(args):
        raise OSError(28, "No space left on device", "/results/x.json")

    assert run_command("report", full_disk, None) == 1
    assert capsys.readouterr().err.strip() == "dawnpipe report: error: No space left on device: /results/x.json"


def test_writing_through_a_symlink_keeps_the_link(tmp_path):
    target, link = tmp_path / "real.json", tmp_path / "link.json"
    target.write_text("{}")
    link.symlink_to(target)
    write_json(link, {"a": 1})
    assert link.is_symlink() and json.loads(target.read_text()) == {"a": 1}


def test_writing_to_a_pipe_streams_into_it_and_leaves_it_a_pipe(tmp_path):
    fifo = tmp_path / "out"
    os.mkfifo(fifo)
    got = []
    reader = threading.Thread(target=lambda: got.append(fifo.read_text()))
    reader.start()
    write_json(fifo, {"a": 1})
    reader.join(timeout=60)  # a hang guard
    assert json.loads(got[0]) == {"a": 1}
    assert fifo.exists() and not fifo.is_file()  # still the pipe, not a file renamed over it


def test_writing_to_a_directory_names_the_directory(tmp_path):
    with pytest.raises(DawnpipeError, match=f"{tmp_path}: is a directory"):
        write_json(tmp_path, {"a": 1})
    assert not list(tmp_path.iterdir())  # no temporary left behind
