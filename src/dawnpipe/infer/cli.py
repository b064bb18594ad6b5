"""infer: latency of answering the inference set one item at a time.

    python -m dawnpipe infer --checkpoint results/runs/E/seed0/model.pt \\
        --run-json results/runs/E/seed0/run.json --data data/prepared/fashion-mnist \\
        --prices config/prices.yaml --out results/runs/E/seed0/latency.json \\
        --items-parquet results/runs/E/seed0/latency.parquet --threads 1

The first ``--warmup`` items are answered once untimed (reported, excluded);
then every item of the set is timed on its own: from the stored uint8 item to
the predicted class id. The mean (total time / items) ranks; p50/p90/p99/max
describe the distribution. Accuracy is recomputed from these same answers: a
model below the threshold is measured but marked ``meets_threshold: false``.
"""

from __future__ import annotations

import time
from pathlib import Path

import numpy as np
import pandas as pd

from dawnpipe import telemetry
from dawnpipe.argtypes import optional_int
from dawnpipe.data.loader import ShardedArray, load_split, prepared_dir
from dawnpipe.fileio import read_json, write_json, write_parquet
from dawnpipe.infer.latency import latency_stats
from dawnpipe.prices import load_prices, price_per_hour
from dawnpipe.progress import progress
from dawnpipe.schemas.results import LatencyResult, validate
from dawnpipe.tasks import get_task
from dawnpipe.tta import inference_cost_per_10k


def time_items(predict, images: np.ndarray, labels: np.ndarray, warmup: int, desc: str):
    for i in range(min(warmup, len(images))):
        predict(images[i])
    seconds = np.empty(len(images))
    correct = np.empty(len(images), dtype=bool)
    clock = time.perf_counter
    for i in progress(range(len(images)), desc=desc, unit="item"):
        item = images[i]
        start = clock()
        pred = predict(item)
        seconds[i] = clock() - start
        correct[i] = labels[i] in pred if isinstance(pred, list) else pred == labels[i]  # a list: top-k ids
    return seconds, correct


def configure(p) -> None:
    p.add_argument("--checkpoint", required=True, type=Path, help="model.pt written by the train stage")
    p.add_argument("--run-json", required=True, type=Path, help="the run's run.json (entry, threshold, hardware)")
    p.add_argument("--data", required=True, type=Path, help="prepared data directory, or a directory of them named by task")
    p.add_argument("--prices", required=True, type=Path, help="price table (config/prices.yaml)")
    p.add_argument("--out", required=True, type=Path, help="output: latency summary JSON")
    p.add_argument("--items-parquet", required=True, type=Path, help="output: per-item latencies (Parquet)")
    p.add_argument("--threads", type=int, default=1, help="CPU threads of the framework (recorded; default 1)")
    p.add_argument("--warmup", type=int, default=50, help="untimed warm-up items before timing (default 50)")
    p.add_argument("--limit", type=optional_int, help="answer only the first N items (demo/test configs; null = all)")
    p.add_argument("--telemetry", type=Path, help="output: hardware samples while answering, Parquet (default: none)")
    p.add_argument("--telemetry-interval", type=float, default=1.0, help="seconds between hardware samples (default 1)")


def run(args) -> int:
    run_info = read_json(args.run_json)
    args.data = prepared_dir(args.data, run_info["task"])
    if get_task(run_info["task"]).data.get("kind") == "squad":  # questions with paragraphs, not images
        from dawnpipe.infer.squad_predictor import run as run_squad

        with telemetry.sampling(args.telemetry, args.telemetry_interval if args.telemetry else 0):  # the whole SQuAD stage
            return run_squad(args, run_info)
    task = get_task(run_info["task"])
    split = load_split(args.data, "test", args.limit)
    # sharded sets stay on disk: indexing one item reads it into memory before the clock starts
    images = split.images if isinstance(split.images, ShardedArray) else np.array(split.images)
    labels = np.array(split.labels)
    on_cuda = run_info["environment"].get("device", "cpu").startswith("cuda")
    topk = 5 if task.metric_column == "top5Accuracy" else 1  # the answer is the task's: ImageNet's is five classes
    if run_info["framework"] == "tensorflow":  # issue 7; one line of issue 4's backend registry once that lands
        from dawnpipe.infer.tf_backend import prepare

        predictor = prepare(args.checkpoint, device="auto" if on_cuda else "cpu", threads=args.threads, check_items=images[:256], topk=topk)
        predict, backend, device, threads = predictor.predict, predictor.backend, predictor.device, predictor.threads
    else:
        import torch

        from dawnpipe.infer.torch_backend import eager_predictor, load_checkpoint

        torch.set_num_threads(args.threads)
        device = torch.device("cuda" if on_cuda and torch.cuda.is_available() else "cpu")
        predict, backend, threads = eager_predictor(load_checkpoint(args.checkpoint), device, topk=topk), "eager", torch.get_num_threads()
    with telemetry.sampling(args.telemetry, args.telemetry_interval if args.telemetry else 0):
        seconds, correct = time_items(predict, images, labels, args.warmup, f"infer {run_info['entry']} s{run_info['seed']}")
    accuracy = 100.0 * float(correct.mean())
    usd_per_hour = price_per_hour(load_prices(args.prices), run_info.get("hardware_price_tag", run_info["hardware"]))  # one machine
    stats = latency_stats(seconds)
    record = {
        "entry": run_info["entry"], "seed": int(run_info["seed"]), "task": task.name, "model": run_info["model"],
        "framework": run_info["framework"], "hardware": run_info["hardware"], "backend": backend,
        "device": str(device), "threads": threads, "items": int(len(images)),
        "official_items": task.inference_items, "warmup_items": min(args.warmup, len(images)),
        "accuracy": accuracy, "metric": task.metric_column, "threshold": float(run_info["threshold"]),
        "demo_threshold": bool(run_info["demo_threshold"]), "meets_threshold": accuracy >= run_info["threshold"],
        **stats, "usd_per_hour": usd_per_hour,
        "cost_per_10k_usd": inference_cost_per_10k(stats["latency_mean_ms"], usd_per_hour),
    }
    validate(LatencyResult, pd.DataFrame([record]), f"latency of {args.checkpoint}")
    write_parquet(args.items_parquet, pd.DataFrame({"item": np.arange(len(images)), "latency_ms": seconds * 1000.0, "correct": correct}))
    write_json(args.out, record)
    print(f"infer: {record['entry']} seed {record['seed']}: mean {stats['latency_mean_ms']:.4f} ms, p50 {stats['latency_p50_ms']:.4f}, "
          f"p99 {stats['latency_p99_ms']:.4f} over {len(images)} items ({record['threads']} threads); accuracy {accuracy:.2f}%"
          + ("" if record["meets_threshold"] else f" < threshold {run_info['threshold']:g}: excluded from the latency ranking"))
    return 0
