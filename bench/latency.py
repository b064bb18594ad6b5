"""Inference latency of the fast Fashion-MNIST entry: eager PyTorch against
the best other backend, in one run (issue 4).

    python bench/latency.py results/runs/fastnet/seed0/model.pt
    python bench/latency.py CHECKPOINT --data data/prepared/fashion-mnist \\
        --backends torchscript onnxruntime onnxruntime-int8 compile --threads 1 --warmup 50

CHECKPOINT is a model.pt of config/entries/fastnet.yaml written by the train
stage (this script does not train); e.g. `snakemake --cores all
results/runs/fastnet/seed0/model.pt`, or `python -m dawnpipe train --entry
config/entries/fastnet.yaml --seed 0 ...` as in src/dawnpipe/train/cli.py.

Each backend is prepared exactly as by `dawnpipe infer` (registry in
src/dawnpipe/infer/backends.py; exported models checked against the
checkpoint), then answers all 10,000 test images one at a time with the same
timing loop (src/dawnpipe/infer/timing.py): warm-up excluded, per-item times,
mean = total / items. One line per backend: mean, p50, p90, p99, max, accuracy,
and the 1-minute load average before and after (on a shared machine the mean
is hit by whatever else runs; p50 much less).

The best backend is the one with the lowest mean latency among those whose
accuracy is unchanged: at most --max-accuracy-change percentage points from
eager's (default 0.1, i.e. 10 of 10,000 answers) and at or above the
checkpoint's threshold. The last line is
`latency speedup over eager: <mean latency of eager / mean latency of the best>x`.
"""

from __future__ import annotations

import argparse
import os
import sys
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "src"))

from dawnpipe.infer.backends import get_backend, load_backend  # noqa: E402
from dawnpipe.infer.items import KINDS  # noqa: E402
from dawnpipe.infer.latency import latency_stats  # noqa: E402
from dawnpipe.infer.timing import time_items  # noqa: E402
from dawnpipe.tasks import get_task  # noqa: E402


def measure(name: str, checkpoint: Path, inference, threads: int, warmup: int) -> dict:
    """As `dawnpipe infer` prepares, times and scores one backend."""
    backend, kind = get_backend(name, "image"), KINDS["image"]
    extra = {"calibration_items": kind.calibration_items(inference)} if backend.calibrates else {}
    load_before = os.getloadavg()[0]
    predictor = load_backend(backend).prepare(checkpoint, device="cpu", threads=threads, check_items=inference.items, **extra)
    times = time_items(predictor.predict, inference.items, warmup=warmup, sync=predictor.sync, desc=name)
    accuracy = kind.score(get_task("fashion-mnist"), times.answers, inference).value
    return {"backend": name, "accuracy": accuracy, "answers": np.asarray(times.answers), "threads": predictor.threads,
            "precision": predictor.precision, "prepare_s": predictor.notes.get("prepare_seconds", float("nan")),
            "load": (load_before, os.getloadavg()[0]), **latency_stats(times.seconds)}


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("checkpoint", type=Path, help="model.pt of the fastnet entry (written by the train stage)")
    p.add_argument("--data", type=Path, default=ROOT / "data/prepared/fashion-mnist", help="prepared Fashion-MNIST")
    p.add_argument("--backends", nargs="+", default=["torchscript", "onnxruntime", "onnxruntime-int8"], help="candidates against eager")
    p.add_argument("--threads", type=int, default=1, help="framework threads of every backend (default 1)")
    p.add_argument("--warmup", type=int, default=50, help="untimed warm-up items (default 50)")
    p.add_argument("--max-accuracy-change", type=float, default=0.1, help="percentage points from eager's accuracy that still count as unchanged")
    args = p.parse_args(argv)

    import torch

    threshold = float(torch.load(args.checkpoint, map_location="cpu", weights_only=False)["threshold"])
    inference = KINDS["image"].load(get_task("fashion-mnist"), args.data, None)
    labels = inference.truth
    print(f"bench/latency: {args.checkpoint} ({len(labels)} test images, one at a time, {args.threads} thread(s), "
          f"{args.warmup} warm-up items; threshold {threshold:g}%; {os.cpu_count()} CPUs, torch {torch.__version__})", flush=True)
    results = []
    for name in ["eager", *[b for b in args.backends if b != "eager"]]:
        r = measure(name, args.checkpoint, inference, args.threads, args.warmup)
        results.append(r)
        print(f"{name:>17}: mean {r['latency_mean_ms']:.4f} ms  p50 {r['latency_p50_ms']:.4f}  p90 {r['latency_p90_ms']:.4f}  "
              f"p99 {r['latency_p99_ms']:.4f}  max {r['latency_max_ms']:.4f}  accuracy {r['accuracy']:.2f}%  "
              f"({r['precision']}, prepared in {r['prepare_s']:.1f}s; load average {r['load'][0]:.1f} -> {r['load'][1]:.1f})", flush=True)
    eager = results[0]
    unchanged = [r for r in results[1:] if abs(r["accuracy"] - eager["accuracy"]) <= args.max_accuracy_change + 1e-9 and r["accuracy"] >= threshold]
    if not unchanged:
        print(f"no backend kept eager's accuracy {eager['accuracy']:.2f}% within {args.max_accuracy_change} points and the threshold")
        print("latency speedup over eager: nanx")
        return 1
    best = min(unchanged, key=lambda r: r["latency_mean_ms"])
    differ = int((best["answers"] != eager["answers"]).sum())
    print(f"best: {best['backend']}: accuracy {best['accuracy']:.2f}% vs eager {eager['accuracy']:.2f}% "
          f"({differ} of {len(labels)} answers differ from eager's); p50 ratio {eager['latency_p50_ms'] / best['latency_p50_ms']:.2f}x")
    print(f"latency speedup over eager: {eager['latency_mean_ms'] / best['latency_mean_ms']:.2f}x")
    return 0


if __name__ == "__main__":
    sys.exit(main())
