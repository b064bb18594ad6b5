"""A tiny real training setup shared by the resume, DDP and Slurm tests:
Fashion-MNIST prepared from the Debian package, and a narrow fastnet entry
that trains in seconds on one core (2,000 images, 4 epochs)."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pandas as pd
import yaml

from conftest import run_cli, tool_env

TINY_ENTRY = {
    "description": "tiny fastnet for the tests",
    "task": "fashion-mnist",
    "framework": "pytorch",
    "model": "fastnet",
    "model_args": {"widths": [8, 16, 32, 64]},
    "hardware": "local-cpu",
    "device": "cpu",
    "hyperparameters": {
        "batch_size": 64, "epochs": 4, "lr": 0.2, "nesterov": True, "label_smoothing": 0.1,
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


def train_args(entry: Path, data: Path, out: Path, *, seed: int = 0, threads: int = 1, extra: tuple[str, ...] = ()) -> list[str]:
    return ["train", "--entry", str(entry), "--seed", str(seed), "--data", str(data),
            "--tsv", str(out / "train.tsv"), "--log-parquet", str(out / "train.parquet"),
            "--checkpoint", str(out / "model.pt"), "--run-json", str(out / "run.json"), "--work-dir", str(out / "work"),
            "--threshold", str(THRESHOLD), "--train-limit", str(TRAIN_LIMIT), "--test-limit", str(TEST_LIMIT),
            "--threads", str(threads), *extra]


def start_training(args: list[str], env: dict | None = None) -> subprocess.Popen:
    """``python -m dawnpipe train ...`` in the background (output to pipes)."""
    return subprocess.Popen([sys.executable, "-m", "dawnpipe", *args], env=env or tool_env(),
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)


def read_log(out: Path) -> tuple[pd.DataFrame, pd.DataFrame]:
    """(the TSV, the Parquet log) of a finished run."""
    return pd.read_csv(out / "train.tsv", sep="\t"), pd.read_parquet(out / "train.parquet")
