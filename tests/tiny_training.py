"""A tiny real training setup shared by the resume, DDP and Slurm tests:
Fashion-MNIST prepared from the Debian package, and a narrow fastnet entry
that trains in seconds on one core (2,000 images, 4 epochs)."""

from __future__ import annotations

import json
import signal
import subprocess
import sys
import time
from pathlib import Path

import pandas as pd
import pytest
import yaml
from conftest import run_cli, tool_env, train_command

from dawnpipe.pipeline.values import train_settings

TINY_ENTRY = {
    "description": "tiny fastnet for the tests",
    "task": "fashion-mnist",
    "framework": "pytorch",
    "model": "fastnet",
    "model_args": {"widths": [8, 16, 32, 64]},
    "hardware": "local-cpu",
    "device": "cpu",
    "hyperparameters": {
        "batch_size": 64,
        "epochs": 4,
        "lr": 0.2,
        "nesterov": True,
        "label_smoothing": 0.1,
        "schedule": {"kind": "onecycle", "peak_epoch": 1},
        "augment": {"crop_padding": 2, "flip": True},
    },
}
TRAIN_LIMIT, TEST_LIMIT, THRESHOLD = 2000, 1000, 75.0


def prepare_fashion_mnist(source: str, dest: Path) -> Path:
    """Fetch (a copy of the Debian package's files) and prepare; returns the prepared dir."""
    run_cli("fetch", "fashion-mnist", "--dest", str(dest / "raw"), "--cache", str(dest / "partial"), "--source", source, check=True)
    run_cli("prepare", "fashion-mnist", "--raw", str(dest / "raw"), "--out", str(dest / "prepared"), check=True)
    return dest / "prepared"


def write_entry(path: Path, **changes) -> Path:
    entry = {**TINY_ENTRY, **changes}
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(yaml.safe_dump(entry, sort_keys=False), encoding="utf-8")
    return path


def train_args(
    entry: Path, data: Path, out: Path, *, seed: int = 0, threads: int = 1, train_limit: int = TRAIN_LIMIT, extra: tuple[str, ...] = ()
) -> list[str]:
    """The train stage's command for a tiny run into ``out`` (its per-epoch state in out/work), then ``extra``."""
    settings = train_settings(THRESHOLD, train_limit=train_limit, test_limit=TEST_LIMIT)
    return [*train_command(entry, data, out, seed=seed, settings=settings, work_dir=out / "work", threads=threads), *extra]


def start_training(args: list[str], env: dict | None = None) -> subprocess.Popen:
    """``python -m dawnpipe train ...`` in the background (output to pipes)."""
    return subprocess.Popen([sys.executable, "-m", "dawnpipe", *args], env=env or tool_env(), stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)


def read_log(out: Path) -> tuple[pd.DataFrame, pd.DataFrame]:
    """(the TSV, the Parquet log) of a finished run."""
    return pd.read_csv(out / "train.tsv", sep="\t"), pd.read_parquet(out / "train.parquet")


def _wait_for(predicate, proc, what: str, timeout: float = 300.0):
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        found = predicate()
        if found:
            return found
        if proc.poll() is not None:
            out, err = proc.communicate()
            raise AssertionError(f"training ended ({proc.returncode}) before {what}:\n{out}\n{err}")
        time.sleep(0.01)
    proc.kill()
    raise AssertionError(f"timed out waiting for {what}")


def _marker(work: Path, epoch: int):
    """The epoch marker while `epoch` is in its training loop (None otherwise)."""
    try:
        doc = json.loads((work / "epoch.json").read_text())
    except (FileNotFoundError, json.JSONDecodeError):
        return None
    return doc if doc["epoch"] == epoch and doc["trained_seconds"] is None else None


def signal_mid_epoch(proc, work: Path, epoch: int, sig: signal.Signals) -> None:
    """Deliver ``sig`` while ``epoch`` trains, whatever the machine's speed: the
    process is frozen (SIGSTOP) as soon as the epoch starts, checked to be
    still in its training loop, signalled, and let go."""
    _wait_for(lambda: _marker(work, epoch), proc, f"epoch {epoch} to start")
    proc.send_signal(signal.SIGSTOP)
    try:
        assert _marker(work, epoch), f"epoch {epoch} finished its training loop before the process could be stopped"
        proc.send_signal(sig)
    finally:
        if sig != signal.SIGKILL:
            proc.send_signal(signal.SIGCONT)


# Runs `dawnpipe ARGS` with the trainer module's `evaluate` made slower by a
# sleep: real training, real evaluation, only later. The training clock must
# not see the extra seconds.
SLOW_EVALUATION = """
import sys, time, importlib
module = importlib.import_module(sys.argv[1])
seconds = float(sys.argv[2])
real = module.evaluate

def slow_evaluate(*args, **kwargs):
    time.sleep(seconds)
    return real(*args, **kwargs)

module.evaluate = slow_evaluate
from dawnpipe.cli import main
main(sys.argv[3:])
"""


def run_with_slow_evaluation(module: str, seconds: float, args: list[str], timeout: float = 900) -> subprocess.CompletedProcess:
    proc = subprocess.run([sys.executable, "-c", SLOW_EVALUATION, module, str(seconds), *args], env=tool_env(), capture_output=True, text=True, timeout=timeout)
    assert proc.returncode == 0, proc.stderr[-3000:]
    return proc


def assert_evaluation_off_the_clock(log: pd.DataFrame, slept: float) -> None:
    """Every epoch's evaluation took more than ``slept`` seconds: none of them
    may be in the training clock (``hours``), all of them in the wall clock.
    No claim on how long an epoch of training takes (that is the machine's):
    an evaluation inside the training clock would leave the wall clock less
    than ``slept`` ahead of it over that epoch, whatever the epoch took."""
    assert (log["eval_seconds"] >= slept).all()
    trained = (log["epoch_train_seconds"] + log["lost_seconds"]).cumsum()
    assert (log["hours"] * 3600).tolist() == pytest.approx(trained.tolist(), rel=1e-6)
    # per epoch: the wall clock moves by that epoch's training and evaluation, the training clock by its training only
    ahead = (log["wall_hours"] - log["hours"]).diff().fillna(log["wall_hours"] - log["hours"]) * 3600
    assert (ahead >= slept).all(), log[["epoch", "hours", "wall_hours", "eval_seconds"]]
