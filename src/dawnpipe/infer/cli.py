"""infer: latency and cost of answering the inference set one item at a time
with one backend (SPEC.md objectives 3-4).

    python -m dawnpipe infer --backend onnxruntime --checkpoint results/runs/E/seed0/model.pt \\
        --run-json results/runs/E/seed0/run.json --data data/prepared/fashion-mnist \\
        --prices config/prices.yaml --out results/runs/E/seed0/latency/onnxruntime.json \\
        --items-parquet results/runs/E/seed0/latency/onnxruntime.parquet --threads 1 --warmup 50

The checkpoint is the one the train stage kept: the first epoch at the
threshold (the last epoch of a run that never reached it). The backend turns
it into a predictor and checks the predictor's outputs against the
checkpoint's before anything is timed. Then the first ``--warmup`` items are
answered untimed (their times are reported), and every item of the set is
timed on its own, from the stored item to the answer
(``dawnpipe.infer.items``). The mean (total / items) ranks; p50/p90/p99/max
describe the distribution. Quality is recomputed from these same answers:
below the threshold, the result is kept but marked ``meets_threshold: false``
(the leaderboard lists it as excluded, with its accuracy).
"""

from __future__ import annotations

from pathlib import Path

from dawnpipe.errors import DawnpipeError, UsageError
from dawnpipe.fileio import read_json, write_json, write_parquet
from dawnpipe.infer.backends import get_backend, load_backend, names
from dawnpipe.infer.items import item_kind
from dawnpipe.infer.result import latency_record
from dawnpipe.infer.timing import time_items
from dawnpipe.prices import load_prices, price_per_hour
from dawnpipe.runinfo import cpu_model, now_iso
from dawnpipe.tasks import get_task


def configure(p) -> None:
    p.add_argument("--backend", default="eager", help=f"inference backend (one of: {', '.join(names())}; default eager)")
    p.add_argument("--checkpoint", required=True, type=Path, help="model.pt written by the train stage")
    p.add_argument("--run-json", required=True, type=Path, help="the run's run.json (entry, threshold, hardware)")
    p.add_argument("--data", required=True, type=Path, help="prepared data directory")
    p.add_argument("--prices", required=True, type=Path, help="price table (config/prices.yaml)")
    p.add_argument("--out", required=True, type=Path, help="output: the inference result (JSON)")
    p.add_argument("--items-parquet", required=True, type=Path, help="output: per-item latencies and answers (Parquet)")
    p.add_argument("--threads", type=int, default=1, help="CPU threads of the framework while answering (recorded; default 1)")
    p.add_argument("--warmup", type=int, default=50, help="untimed warm-up items before timing (reported; default 50)")
    p.add_argument("--device", choices=["auto", "cpu", "cuda"], default="auto", help="where to answer (auto: CUDA when present)")
    p.add_argument("--limit", type=int, help="answer only the first N items (demo/test configs)")


def run(args) -> int:
    if args.threads < 1:
        raise UsageError(f"--threads must be at least 1, not {args.threads}")
    if args.warmup < 0:
        raise UsageError(f"--warmup must be non-negative, not {args.warmup}")
    run_info = read_json(args.run_json)
    task = get_task(run_info["task"])
    kind = item_kind(task)
    backend = get_backend(args.backend, kind.name)
    if run_info["framework"] != backend.framework:
        raise DawnpipeError(f"{args.run_json}: a {run_info['framework']} run; backend {backend.name} reads {backend.framework} checkpoints")
    usd_per_hour = price_per_hour(load_prices(args.prices), run_info["hardware"])
    inference = kind.load(task, args.data, args.limit)
    extra = {"calibration_items": kind.calibration_items(inference)} if backend.calibrates else {}
    print(f"infer: {run_info['entry']} seed {run_info['seed']}, backend {backend.name}: preparing {args.checkpoint}", flush=True)
    predictor = load_backend(backend).prepare(args.checkpoint, device=args.device, threads=args.threads, check_items=inference.items, **extra)
    check = predictor.export_check
    print(f"infer: {backend.name} ready in {predictor.notes.get('prepare_seconds', float('nan')):.1f}s on {predictor.device}, "
          f"{predictor.threads} threads, {predictor.framework_version}"
          + (f"; outputs equal the checkpoint's on {check['items']} items (max |difference| {check['max_abs_diff']:.2g})" if check else ""),
          flush=True)
    times = time_items(predictor.predict, inference.items, warmup=args.warmup, sync=predictor.sync,
                       desc=f"infer {run_info['entry']} s{run_info['seed']} {backend.name}")
    scored = kind.score(task, times.answers, inference)
    record, per_item = latency_record(run_info=run_info, task=task, kind=kind, predictor=predictor, times=times, scored=scored,
                                      usd_per_hour=usd_per_hour, checkpoint=args.checkpoint, cpu_model=cpu_model(), measured=now_iso())
    write_parquet(args.items_parquet, per_item)
    write_json(args.out, record)
    cost = record["cost_per_10k_usd"]
    print(f"infer: {record['entry']} seed {record['seed']} {backend.name}: mean {record['latency_mean_ms']:.4f} ms, "
          f"p50 {record['latency_p50_ms']:.4f}, p90 {record['latency_p90_ms']:.4f}, p99 {record['latency_p99_ms']:.4f}, "
          f"max {record['latency_max_ms']:.4f} over {record['items']} items ({record['threads']} threads; "
          f"{record['warmup_items']} warm-up items excluded, mean {record['warmup_mean_ms'] or 0:.4f} ms); "
          + (f"${cost:.6f} per 10,000 items; " if cost is not None else "no price known; ")
          + f"{task.inference_accuracy_field} {task.format_metric(record['accuracy'])}"
          + ("" if record["meets_threshold"] else f" < threshold {task.format_metric(record['threshold'])}: excluded from the latency ranking"))
    return 0
