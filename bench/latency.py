"""Inference latency of the fast Fashion-MNIST entry: eager PyTorch against
the best other backend, in one run, and whether the best answers one item at
a time at least 3x faster than eager (--target: the goal this script checks).

    python bench/latency.py                   # the bench's own fastnet checkpoint at 93%, trained when missing
    python bench/latency.py --record          # ... and write docs/measurements/latency.json
    python bench/latency.py CHECKPOINT --data data/prepared/fashion-mnist \\
        --backends compile torchscript onnxruntime onnxruntime-int8 --threads 1 --warmup 50 --rounds 4

CHECKPOINT is a model.pt of config/entries/fastnet.yaml written by the train
stage (e.g. results/runs/fastnet/seed0/model.pt of a pipeline run). Without
it, the script uses results/bench/fastnet-seed0/model.pt, which it trains
first when missing: the train stage, seed 0, to the official 93% (about a
minute of training on a 2-core CPU, after the data is prepared; bench/inputs.py).
The default --data, data/prepared/fashion-mnist, is made by the pipeline when
missing.

Each backend is prepared exactly as by `dawnpipe infer` (registry in
src/dawnpipe/infer/backends.py; exported models checked against the
checkpoint), answers --warmup items untimed, then answers all 10,000 test
images one at a time with the infer stage's timing loop
(src/dawnpipe/infer/timing.py) and is scored on its answers. The 10,000 items
are split into --rounds consecutive blocks and the backends take turns block
by block (in a rotating order, each block after 10 untimed items to refill
the caches), so that slow changes in the load of a shared machine hit every
backend alike; --rounds 1 times each backend's 10,000 items in one go.

One line per backend: mean (= total / items), p50, p90, p99, max, accuracy.
The best backend is the one with the lowest mean latency among those whose
accuracy is unchanged: at most --max-accuracy-change percentage points from
eager's (default 0.1, i.e. 10 of 10,000 answers) and at or above the
checkpoint's threshold. Before the last line, the same ratio for the best
backend that is not quantised (fp32: its predictor's precision), measured in
the same run against the same eager, so the headline is not read as a
property of the export alone when only int8 reaches it:
`best fp32 (not quantised): <backend>: latency speedup over eager <ratio>x (p50 ratio <ratio>x)`,
and whether each of them meets --target (default 3, dawnpipe's goal for the
latency of the fast entry). The last line is
`latency speedup over eager: <mean latency of eager / mean latency of the best>x`.

`--record` writes every backend's statistics and accuracy, the best backend,
both ratios, the checkpoint and the load average, with the machine, commit and
command, to docs/measurements/latency.json (bench/record.py);
docs/measurements.md's table is generated from it (`make docs`). On a shared
machine the means carry other jobs' time slices; the p50s are the steadier
comparison, and the record's load average says how quiet the machine was.
"""

from __future__ import annotations

import argparse
import hashlib
import os
import sys
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parent.parent
sys.path[:0] = [str(ROOT / "src"), str(ROOT / "bench")]

from inputs import DATA, ensure_checkpoint, ensure_prepared  # noqa: E402
from record import add_record_flag, shown_path, write_record  # noqa: E402

from dawnpipe.infer.backends import get_backend, load_backend  # noqa: E402
from dawnpipe.infer.items import KINDS  # noqa: E402
from dawnpipe.infer.latency import latency_stats  # noqa: E402
from dawnpipe.infer.timing import time_items  # noqa: E402
from dawnpipe.infer.torch_model import load_checkpoint  # noqa: E402  (its values and weights checked)
from dawnpipe.tasks import get_task  # noqa: E402

REWARM = 10  # untimed items before each later block of a backend


def prepare(name: str, checkpoint: Path, inference, threads: int):
    """The backend as `dawnpipe infer` prepares it."""
    backend, kind = get_backend(name, "image"), KINDS["image"]
    extra = {"calibration_items": kind.calibration_items(inference)} if backend.calibrates else {}
    return load_backend(backend).prepare(checkpoint, device="cpu", threads=threads, check_items=inference.items, **extra)


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument(
        "checkpoint", type=Path, nargs="?", help="model.pt of the fastnet entry (default: results/bench/fastnet-seed0/model.pt, trained to 93%% when missing)"
    )
    p.add_argument("--data", type=Path, default=DATA / "fashion-mnist", help="prepared Fashion-MNIST (default data/prepared/fashion-mnist, made when missing)")
    p.add_argument("--backends", nargs="+", default=["torchscript", "onnxruntime", "onnxruntime-int8"], help="candidates against eager")
    p.add_argument("--threads", type=int, default=1, help="framework threads of every backend (default 1)")
    p.add_argument("--warmup", type=int, default=50, help="untimed warm-up items of each backend (default 50)")
    p.add_argument("--rounds", type=int, default=4, help="blocks the backends take turns on (default 4; 1 = one backend after the other)")
    p.add_argument("--target", type=float, default=3.0, help="speed-up over eager to report as met or not (default 3)")
    p.add_argument("--max-accuracy-change", type=float, default=0.1, help="percentage points from eager's accuracy that still count as unchanged")
    add_record_flag(p, "latency")
    args = p.parse_args(argv)
    argv = [__file__, *(sys.argv[1:] if argv is None else argv)]
    if args.checkpoint is not None:
        load_checkpoint(args.checkpoint)  # a checkpoint given is checked (never unpickled) before any data is made for it
    args.data = ensure_prepared(args.data)
    if args.checkpoint is None:
        args.checkpoint = ensure_checkpoint(ROOT / "config/entries/fastnet.yaml", 0, args.data, get_task("fashion-mnist").threshold)
    load_before = list(os.getloadavg())

    import torch

    task, kind = get_task("fashion-mnist"), KINDS["image"]
    threshold = float(load_checkpoint(args.checkpoint)["threshold"])
    inference = kind.load(task, args.data, None)
    n = len(inference.items)
    names = ["eager", *[b for b in args.backends if b != "eager"]]
    print(
        f"bench/latency: {args.checkpoint} ({n} test images, one at a time, {args.threads} thread(s), {args.warmup} warm-up items, "
        f"{args.rounds} rounds; threshold {threshold:g}%; {os.cpu_count()} CPUs, torch {torch.__version__}; "
        f"load average {os.getloadavg()[0]:.1f})",
        flush=True,
    )
    predictors = {}
    for name in names:
        predictors[name] = prepare(name, args.checkpoint, inference, args.threads)
        print(
            f"{name:>17}: prepared in {predictors[name].notes.get('prepare_seconds', float('nan')):.1f}s, "
            f"{predictors[name].precision}, check against the checkpoint: {predictors[name].export_check}",
            flush=True,
        )
    seconds = {name: [] for name in names}
    answers = {name: [] for name in names}
    bounds = np.linspace(0, n, args.rounds + 1).astype(int)
    for r, (lo, hi) in enumerate(zip(bounds, bounds[1:])):
        order = names[r % len(names) :] + names[: r % len(names)]
        for name in order:
            pred = predictors[name]
            for item in inference.items[lo : lo + (args.warmup if r == 0 else REWARM)]:
                pred.predict(item)  # untimed (the first block's items are timed right after, like the infer stage's warm-up)
            times = time_items(pred.predict, inference.items[lo:hi], sync=pred.sync, desc=f"{name} block {r + 1}/{args.rounds}")
            seconds[name].append(times.seconds)
            answers[name] += times.answers
        print(f"round {r + 1}/{args.rounds} done, load average {os.getloadavg()[0]:.1f}", flush=True)
    results = []
    for name in names:
        stats = latency_stats(np.concatenate(seconds[name]))
        accuracy = kind.score(task, answers[name], inference).value
        results.append({"backend": name, "precision": predictors[name].precision, "accuracy": accuracy, "answers": np.asarray(answers[name]), **stats})
        print(
            f"{name:>17}: mean {stats['latency_mean_ms']:.4f} ms  p50 {stats['latency_p50_ms']:.4f}  p90 {stats['latency_p90_ms']:.4f}  "
            f"p99 {stats['latency_p99_ms']:.4f}  max {stats['latency_max_ms']:.4f}  accuracy {accuracy:.2f}%",
            flush=True,
        )
    eager = results[0]
    unchanged = [r for r in results[1:] if abs(r["accuracy"] - eager["accuracy"]) <= args.max_accuracy_change + 1e-9 and r["accuracy"] >= threshold]
    settings = {
        "checkpoint": shown_path(args.checkpoint),
        "checkpoint_sha256": hashlib.sha256(args.checkpoint.read_bytes()).hexdigest(),
        "threshold": threshold,
        "items": n,
        "threads": args.threads,
        "warmup": args.warmup,
        "rounds": args.rounds,
        "max_accuracy_change": args.max_accuracy_change,
        "target": args.target,
        "torch": torch.__version__,
        "load_average_before": load_before,
        "load_average_after": list(os.getloadavg()),
    }
    rows = [
        {
            "backend": r["backend"],
            "precision": r["precision"],
            "accuracy": r["accuracy"],
            "answers_differing_from_eager": int((r["answers"] != eager["answers"]).sum()),
            **{k: v for k, v in r.items() if k.startswith("latency_")},
        }
        for r in results
    ]
    if not unchanged:
        print(f"no backend kept eager's accuracy {eager['accuracy']:.2f}% within {args.max_accuracy_change} points and the threshold")
        print("latency speedup over eager: nanx")
        if args.record:
            write_record(
                "latency",
                {**settings, "backends": rows, "best": None, "speedup": None, "best_fp32": None, "speedup_fp32": None},
                out_dir=args.record_dir,
                argv=argv,
            )
        return 1
    best = min(unchanged, key=lambda r: r["latency_mean_ms"])
    differ = int((best["answers"] != eager["answers"]).sum())
    print(
        f"best: {best['backend']}: accuracy {best['accuracy']:.2f}% vs eager {eager['accuracy']:.2f}% "
        f"({differ} of {n} answers differ from eager's); p50 ratio {eager['latency_p50_ms'] / best['latency_p50_ms']:.2f}x"
    )
    speedup = eager["latency_mean_ms"] / best["latency_mean_ms"]
    fp32 = [r for r in unchanged if r["precision"] == "fp32"]
    if fp32:
        best32 = min(fp32, key=lambda r: r["latency_mean_ms"])
        speedup32 = eager["latency_mean_ms"] / best32["latency_mean_ms"]
        print(
            f"best fp32 (not quantised): {best32['backend']}: latency speedup over eager {speedup32:.2f}x "
            f"(p50 ratio {eager['latency_p50_ms'] / best32['latency_p50_ms']:.2f}x)"
        )
    else:
        best32, speedup32 = None, None
        print(f"best fp32 (not quantised): none of {', '.join(names[1:])} is an fp32 backend that kept eager's accuracy")
    print(target_note(args.target, best, speedup, best32, speedup32))
    print(f"latency speedup over eager: {speedup:.2f}x")
    if args.record:
        result = {
            **settings,
            "backends": rows,
            "best": best["backend"],
            "speedup": speedup,
            "best_fp32": best32["backend"] if best32 is not None else None,
            "speedup_fp32": speedup32,
        }
        write_record("latency", result, out_dir=args.record_dir, argv=argv)
    return 0


def target_note(target: float, best: dict, speedup: float, best32: dict | None, speedup32: float | None) -> str:
    """Which of the headline and the best fp32 backend reach ``target``x over eager, in words."""
    head = f"target {target:g}x over eager: "
    fp32_met = speedup32 is not None and speedup32 >= target
    if speedup < target:
        return head + f"not met (best {best['backend']} {speedup:.2f}x)"
    if best["precision"] == "fp32" or fp32_met:
        return (
            head
            + f"met by {best['backend']} ({speedup:.2f}x)"
            + (f" and by fp32 {best32['backend']} ({speedup32:.2f}x)" if best32 is not None and best32 is not best and fp32_met else "")
        )
    return head + (
        f"met only by {best['precision']} ({best['backend']} {speedup:.2f}x); "
        + (f"the best fp32 backend, {best32['backend']}, reaches {speedup32:.2f}x" if best32 is not None else "no fp32 backend kept the accuracy")
    )


if __name__ == "__main__":
    from dawnpipe.cli import run_command

    sys.exit(run_command("latency", lambda _: main(), None, prog="bench/latency"))
