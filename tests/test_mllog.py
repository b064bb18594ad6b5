"""Our runs in MLCommons' MLLOG (dawnpipe.train.mllog_writer): a real tiny training
run's train.mllog, parsed back by the mlperf-logging package's own parser,
has one run_start and one run_stop with the status the log implies, one
epoch per row of train.tsv with the same accuracies, and times on the run's
wall clock (run_stop - run_start is the wall time to the threshold)."""

from __future__ import annotations

import json

import pandas as pd
import pytest
from conftest import run_cli
from tiny_training import THRESHOLD, train_args, write_entry

pytestmark = pytest.mark.slow


def parsed(path):
    from mlperf_logging.compliance_checker.mlp_parser import parse_file

    lines, errors = parse_file(str(path), ruleset="4.0.0")
    assert errors == []
    return lines


@pytest.mark.parametrize("threshold", [THRESHOLD, 99.0], ids=["reached", "never-reached"])
def test_train_mllog_parses_with_the_packages_parser(tmp_path, prepared_fashion_mnist, threshold):
    entry = write_entry(tmp_path / "tiny.yaml")
    out = tmp_path / "run"
    args = [a if a != str(THRESHOLD) else str(threshold) for a in train_args(entry, prepared_fashion_mnist, out)]
    run_cli(*args, "--stop-at-threshold", check=True)
    lines = parsed(out / "train.mllog")
    by_key = {}
    for line in lines:
        by_key.setdefault(line.key, []).append(line)
    log = pd.read_csv(out / "train.tsv", sep="\t")
    wall = pd.read_parquet(out / "train.parquet")
    ((start,), (stop,)) = by_key["run_start"], by_key["run_stop"]
    reached = log[log["top1Accuracy"] >= threshold]
    last = reached.iloc[0] if len(reached) else log.iloc[-1]
    assert stop.value["metadata"]["status"] == ("success" if len(reached) else "aborted")
    assert stop.value["metadata"]["epoch_num"] == int(last["epoch"])
    # one epoch per row up to run_stop, with train.tsv's accuracies
    accuracies = [(line.value["metadata"]["epoch_num"], line.value["value"]) for line in by_key["eval_accuracy"]]
    expected = [(int(r["epoch"]), float(r["top1Accuracy"])) for _, r in log[log["epoch"] <= last["epoch"]].iterrows()]
    assert accuracies == expected
    assert [line.value["metadata"]["epoch_num"] for line in by_key["epoch_start"]] == [e for e, _ in expected]
    # the wall clock: run_stop - run_start is the wall time at the end of that epoch's evaluation (ms rounding)
    wall_seconds = float(wall.loc[wall["epoch"] == last["epoch"], "wall_hours"].iloc[0]) * 3600.0
    assert (stop.timestamp - start.timestamp) / 1000.0 == pytest.approx(wall_seconds, abs=0.002)
    # and the training clock beside it, per epoch
    clock = {line.value["metadata"]["epoch_num"]: line.value["metadata"]["training_clock_ms"] for line in by_key["epoch_stop"]}
    assert clock[int(last["epoch"])] == round(float(last["hours"]) * 3.6e6)
    run = json.loads((out / "run.json").read_text())
    assert by_key["seed"][0].value["value"] == 0 and by_key["global_batch_size"][0].value["value"] == 64
    assert by_key["submission_benchmark"][0].value["value"] == "fashion-mnist" and by_key["opt_name"][0].value["value"] == "sgd"
    assert by_key["train_samples"][0].value["value"] == run["result"]["train_items"]
    assert by_key["init_start"][0].timestamp <= start.timestamp
