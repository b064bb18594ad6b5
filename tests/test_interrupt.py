"""A training job killed mid-run (SIGKILL of the whole Snakemake process group)
leaves no output that Snakemake would take as complete, and rerunning
completes, resuming from the per-epoch state instead of starting over.
Like after a power cut, Snakemake's own lock survives the kill: the user
unlocks (as Snakemake's message says), then reruns."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import time

import pytest
import yaml
from conftest import copy_project, run_snakemake, tool_env

pytestmark = pytest.mark.slow

CONFIG = """\
name: interrupt
entries: [fastnet]
seeds: [0]
thresholds: {fashion-mnist: 99.0}   # never reached: the whole epoch budget runs
stop_at_threshold: true
train_limit: 2000
test_limit: 200
inference: {threads: 1, warmup: 5}
prices: config/prices.yaml
"""
OUTPUTS = ["train.tsv", "train.parquet", "model.pt", "run.json"]


def test_killed_training_leaves_nothing_complete_and_resumes(tmp_path, fashion_mnist_source):
    work = copy_project(tmp_path / "wf")
    epochs = yaml.safe_load((work / "config/entries/fastnet.yaml").read_text())["hyperparameters"]["epochs"]
    assert epochs >= 4, "the kill after epoch 2 must land mid-run"
    (work / "config/interrupt.yaml").write_text(CONFIG)
    target = ["results/runs/fastnet/seed0/run.json", "--configfile", "config/interrupt.yaml"]
    log = work / "results/logs/train/fastnet/seed0.log"
    proc = subprocess.Popen(["snakemake", *target], cwd=work, env=tool_env(), start_new_session=True, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        deadline = time.time() + 600
        while time.time() < deadline:
            if log.exists() and "epoch   2/" in log.read_text():
                break
            assert proc.poll() is None, "snakemake ended before training got going"
            time.sleep(0.2)
        else:
            pytest.fail("training never logged epoch 2")
    finally:
        os.killpg(proc.pid, signal.SIGKILL)  # like a power cut: no cleanup anywhere
        proc.wait()

    run_dir = work / "results/runs/fastnet/seed0"
    assert not any((run_dir / name).exists() for name in OUTPUTS), "a killed run left final-looking outputs"
    assert (work / "results/.work/fastnet/seed0/last.pt").exists()

    locked = subprocess.run(["snakemake", *target], cwd=work, env=tool_env(), capture_output=True, text=True)
    assert locked.returncode != 0 and "cannot be locked" in locked.stdout + locked.stderr
    run_snakemake(work, "--unlock", *target)
    dry = run_snakemake(work, "-n", *target)
    assert "train" in dry.stdout

    run_snakemake(work, *target)
    text = log.read_text()
    assert "resuming after epoch" in text
    run = json.loads((run_dir / "run.json").read_text())
    assert run["result"]["resumed_from_epoch"] >= 2 and run["result"]["epochs_run"] == epochs
    tsv = (run_dir / "train.tsv").read_text().splitlines()
    assert len(tsv) == 1 + epochs and [int(line.split("\t")[0]) for line in tsv[1:]] == list(range(1, epochs + 1))
