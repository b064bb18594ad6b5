"""Small DAWNBench v1 submissions written into a temporary directory, for the
audit, leaderboard and export tests. Each helper writes real files that the
real auditor then reads; nothing is mocked."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

# A CIFAR-10 training log that reaches 94% at epoch 3 (line 4), after 0.03 h.
CIFAR_TSV = "epoch\thours\ttop1Accuracy\n1\t0.01\t80.5\n2\t0.02\t91.0\n3\t0.03\t94.2\n4\t0.04\t94.5\n"


def train_meta(**over: Any) -> dict[str, Any]:
    doc = {
        "version": "v1.0",
        "author": "Test Team",
        "authorEmail": "team@example.org",
        "framework": "PyTorch 1.0",
        "codeURL": "https://example.org/code",
        "model": "ResNet 9",
        "hardware": "1 V100 (AWS p3.2xlarge)",
        "costPerHour": 3.06,
        "timestamp": "2019-01-02",
        "misc": {"batchSize": 512},
    }
    doc.update(over)
    return {k: v for k, v in doc.items() if v is not _DROP}


def inference_meta(task: str = "CIFAR10", **over: Any) -> dict[str, Any]:
    field = {"CIFAR10": "top1Accuracy", "ImageNet": "top5Accuracy", "SQuAD": "f1Score", "FashionMNIST": "top1Accuracy"}[task]
    value = {"CIFAR10": 94.5, "ImageNet": 93.2, "SQuAD": 0.76, "FashionMNIST": 93.5}[task]
    doc = train_meta(latency=2.0, cost=2.0 / 3_600_000 * 3.06, **{field: value})
    doc.pop("costPerHour")
    doc.update(over)
    return {k: v for k, v in doc.items() if v is not _DROP}


class _Drop:
    def __repr__(self) -> str:
        return "DROP"


_DROP = _Drop()
DROP = _DROP  # train_meta(costPerHour=DROP): leave the field out


def write(root: Path, rel: str, content: Any) -> Path:
    path = root / rel
    path.parent.mkdir(parents=True, exist_ok=True)
    if isinstance(content, (dict, list)):
        content = json.dumps(content, indent=2)
    if isinstance(content, str):
        content = content.encode("utf-8")
    path.write_bytes(content)
    return path


def train_pair(root: Path, name: str = "team_resnet9_1v100_pytorch", task: str = "CIFAR10", tsv: Any = CIFAR_TSV, **meta: Any) -> tuple[Path, Path]:
    j = write(root, f"{task}/train/{name}.json", train_meta(**meta))
    t = write(root, f"{task}/train/{name}.tsv", tsv)
    return j, t


def messages(report, suffix: str) -> list:
    """All messages of the file whose path ends with ``suffix``."""
    files = [f for f in report.files if f.path.endswith(suffix)]
    assert files, f"no audited file ends with {suffix}: {[f.path for f in report.files]}"
    return files[0].messages


def codes(report, suffix: str) -> dict[str, str]:
    """{code: severity} of the messages of one file."""
    return {m.code: m.severity for m in messages(report, suffix)}


def submission(report, name: str):
    subs = [s for s in report.submissions if s.name == name]
    assert subs, f"no submission {name}"
    return subs[0]


# ------------------------------------------------------------ our own runs
def run_dir(
    root: Path,
    entry: str = "fastnet",
    seed: int = 0,
    *,
    threshold: float = 70.0,
    tsv: str | None = None,
    latencies: list[dict[str, Any]] | None = None,
    usd_per_hour: float | None = 0.10264,
) -> Path:
    """A run directory as the train/extract/infer stages leave it (run.json,
    train.tsv, train.parquet, time_to_accuracy.json, latency*.json), for a
    Fashion-MNIST run; the records are checked against the result schemas."""
    import pandas as pd

    from dawnpipe.metrics.tta import time_to_accuracy
    from dawnpipe.schemas.results import LatencyResult, TimeToAccuracyResult, validate

    d = root / "runs" / entry / f"seed{seed}"
    d.mkdir(parents=True, exist_ok=True)
    tsv = tsv or "epoch\thours\ttop1Accuracy\n1\t0.002\t60.5\n2\t0.004\t72.25\n3\t0.006\t80.0\n"
    (d / "train.tsv").write_text(tsv)
    lines = [line.split("\t") for line in tsv.strip().split("\n")[1:]]
    epochs, hours, acc = ([float(r[i]) for r in lines] for i in range(3))
    # the columns every trainer writes (dawnpipe.train.logbook), as the report reads and checks them
    seconds = [3600.0 * (h - before) for h, before in zip(hours, [0.0, *hours[:-1]], strict=True)]
    log = pd.DataFrame(
        {
            "epoch": epochs,
            "top1Accuracy": acc,
            "hours": hours,
            "wall_hours": [h * 1.1 for h in hours],
            "train_loss": [1.0 / e for e in epochs],
            "eval_seconds": [0.5 for _ in epochs],
            "epoch_train_seconds": seconds,
            "lr": [0.1 for _ in epochs],
            "items_per_second": [60000 / s for s in seconds],
        }
    )
    log.to_parquet(d / "train.parquet", index=False)
    tta = time_to_accuracy(epochs, hours, acc, threshold)
    run = {
        "entry": entry,
        "seed": seed,
        "task": "fashion-mnist",
        "framework": "pytorch",
        "model": entry,
        "hardware": "local-cpu",
        "threshold": threshold,
        "official_threshold": 93.0,
        "demo_threshold": threshold != 93.0,
        "config_hash": "c0ffee",
        "data_manifest_sha256": "d00d",
        "started": "2026-11-21T10:00:00+00:00",
        "finished": "2026-11-21T10:05:00+00:00",
        "result": {"train_items": 60000, "test_items": 10000},
        "environment": {
            "cpu_model": "Test CPU",
            "cpu_count": 2,
            "threads": 2,
            "framework": "pytorch",
            "framework_version": "2.13.0+cpu",
            "python": "3.11",
            "device": "cpu",
            "git": {"commit": None, "dirty": None},
            "gpus": [],
        },
        "settings": {"entry": {"description": "test entry", "hyperparameters": {"batch_size": 256}}},
    }
    (d / "run.json").write_text(json.dumps(run))
    record = {
        "entry": entry,
        "seed": seed,
        "task": "fashion-mnist",
        "model": entry,
        "framework": "pytorch",
        "hardware": "local-cpu",
        "threshold": threshold,
        "official_threshold": 93.0,
        "demo_threshold": threshold != 93.0,
        "reached": tta.reached,
        "epochs_to_accuracy": tta.epoch,
        "time_to_accuracy_hours": tta.hours,
        "wall_time_to_accuracy_hours": None if tta.hours is None else tta.hours * 1.1,
        "usd_per_hour": usd_per_hour,
        "cost_usd": None if tta.hours is None or usd_per_hour is None else tta.hours * usd_per_hour,
        "best_metric": tta.best_metric,
        "epochs_run": epochs[-1],
        "training_hours": hours[-1],
        "metric": "top1Accuracy",
        "reason": None if tta.reached else f"did not converge: best top1Accuracy {tta.best_metric:.2f}% < {threshold:.2f}%",
    }
    validate(TimeToAccuracyResult, pd.DataFrame([record]), "test run")
    (d / "time_to_accuracy.json").write_text(json.dumps(record))
    for i, over in enumerate(latencies if latencies is not None else [{}]):
        lat = {
            "entry": entry,
            "seed": seed,
            "task": "fashion-mnist",
            "model": entry,
            "framework": "pytorch",
            "hardware": "local-cpu",
            "backend": "eager",
            "device": "cpu",
            "threads": 1,
            "items": 10000,
            "official_items": 10000,
            "warmup_items": 50,
            "accuracy": 80.0,
            "metric": "top1Accuracy",
            "threshold": threshold,
            "demo_threshold": threshold != 93.0,
            "meets_threshold": True,
            "latency_mean_ms": 1.5,
            "latency_p50_ms": 1.4,
            "latency_p90_ms": 1.7,
            "latency_p99_ms": 2.5,
            "latency_max_ms": 3.0,
            "usd_per_hour": usd_per_hour,
            "cost_per_10k_usd": None if usd_per_hour is None else 1.5 / 3_600_000 * usd_per_hour * 10_000,
        }
        lat.update(over)
        validate(LatencyResult, pd.DataFrame([lat]), "test latency")
        name = "latency.json" if i == 0 else f"latency-{lat['backend']}-{lat['threads']}t.json"
        (d / name).write_text(json.dumps(lat))
    return d
