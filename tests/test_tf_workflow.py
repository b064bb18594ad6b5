"""A TensorFlow entry end to end through Snakemake, beside its PyTorch twin,
on config/test.yaml's data. The temporary copy of the project makes it cheap:
one seed, a demo threshold of 50%, and both entries at width 8, half the
ResNet-20's (the two trainings took 76 CPU seconds instead of 135 on a 2-core
test machine, and still reached the threshold in their third epoch). Both
reach the same leaderboard and its framework comparison."""

from __future__ import annotations

import json
import re

import pandas as pd
import pytest
import yaml
from conftest import copy_project, resolved_config, run_snakemake

from dawnpipe.logs import read_run_tsv
from dawnpipe.schemas.results import RunLog, log_model, validate
from dawnpipe.tasks import get_task

pytestmark = pytest.mark.slow

ENTRIES = ["resnet20-dawn", "resnet20-dawn-tf"]
NARROW_WIDTH = 8  # the zoo's ResNet-20 is 16 channels wide at its first stage


@pytest.fixture(scope="module")
def tf_workflow(tmp_path_factory, fashion_mnist_source):
    work = copy_project(tmp_path_factory.mktemp("tfwf"))
    for entry_id in ENTRIES:  # the same narrower network in both frameworks
        path = work / "config/entries" / f"{entry_id}.yaml"
        entry = yaml.safe_load(path.read_text(encoding="utf-8"))
        path.write_text(yaml.safe_dump({**entry, "model_args": {"width": NARROW_WIDTH}}, sort_keys=False), encoding="utf-8")
    config = resolved_config(work, "config/test.yaml")
    config.update(name="tf-test", entries=ENTRIES, seeds=[0], thresholds={"fashion-mnist": 50.0})
    (work / "config/tf-test.yaml").write_text(yaml.safe_dump(config))
    run_snakemake(work, "results/leaderboard.html", "--configfile", "config/tf-test.yaml", timeout=3000)
    return work


def test_tf_run_has_every_output_of_a_run(tf_workflow):
    run_dir = tf_workflow / "results/runs/resnet20-dawn-tf/seed0"
    task = get_task("fashion-mnist")
    validate(log_model(task), read_run_tsv(run_dir / "train.tsv", task), "tf train.tsv")
    validate(RunLog, pd.read_parquet(run_dir / "train.parquet"), "tf train.parquet")
    run = json.loads((run_dir / "run.json").read_text())
    torch_run = json.loads((tf_workflow / "results/runs/resnet20-dawn/seed0/run.json").read_text())
    assert run["framework"] == run["environment"]["framework"] == "tensorflow"
    # the same network in both frameworks (the comparison groups by model name, not by its arguments)
    assert run["settings"]["entry"]["model_args"] == torch_run["settings"]["entry"]["model_args"] == {"width": NARROW_WIDTH}
    assert run["environment"]["threads_set"] and run["environment"]["threads"] == torch_run["environment"]["threads"]  # same --threads
    assert run["result"]["reached"], run["result"]
    tta = json.loads((run_dir / "time_to_accuracy.json").read_text())
    assert tta["framework"] == "tensorflow" and tta["reached"]
    latency = json.loads((run_dir / "latency.json").read_text())
    assert latency["backend"] == "tf-function" and latency["items"] == 500 and latency["meets_threshold"]


def test_both_frameworks_on_one_leaderboard(tf_workflow):
    board = json.loads((tf_workflow / "results/leaderboard.json").read_text())
    train_time = [t for t in board["objectives"] if t["task"] == "fashion-mnist" and t["objective"] == "train_time" and t["threshold"] == 50.0]
    assert len(train_time) == 1
    assert sorted(r["framework"] for r in train_time[0]["rows"]) == ["pytorch", "tensorflow"]
    compared = board["frameworks"]
    assert [(r["model"], r["framework"]) for r in compared] == [("resnet20", "pytorch"), ("resnet20", "tensorflow")]
    assert all(r["epoch_seconds_median"] > 0 and r["latency_mean_ms"] > 0 and r["reached_runs"] == 1 for r in compared)
    html = (tf_workflow / "results/leaderboard.html").read_text()
    # one row per entry: the same model in both frameworks
    assert 'id="framework-fashion-mnist-resnet20-local-cpu-tensorflow-resnet20-dawn-tf"' in html
    assert 'id="framework-fashion-mnist-resnet20-local-cpu-pytorch-resnet20-dawn"' in html
    assert [r["inference_backends"] for r in compared] == [["eager"], ["tf-function"]]  # each framework's own runtime


def test_tf_job_logs_are_not_flooded_by_tensorflow(tf_workflow):
    """TF_CPP_MIN_LOG_LEVEL=1 hides C++ INFO lines; only oneDNN's notice,
    which ignores it (tensorflow#100442), may remain."""
    for stage in ("train", "infer"):
        log = (tf_workflow / f"results/logs/{stage}/resnet20-dawn-tf/seed0.log").read_text()
        info = [ln for ln in log.splitlines() if re.match(r"I\d{4} ", ln) and "port.cc" not in ln]
        assert not info, info
        assert f"{stage}: resnet20-dawn-tf" in log
