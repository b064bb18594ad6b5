"""infer: latency and cost of answering the inference set one item at a time,
with one backend or several (docs/rules.md#3-inference-latency,
docs/rules.md#4-inference-cost).

    python -m dawnpipe infer --backend onnxruntime --checkpoint results/runs/E/seed0/model.pt \\
        --run-json results/runs/E/seed0/run.json --data data/prepared/fashion-mnist \\
        --prices config/prices.yaml --out results/runs/E/seed0/latency/onnxruntime.json \\
        --items-parquet results/runs/E/seed0/latency/onnxruntime.parquet --threads 1 --warmup 50

    python -m dawnpipe infer --backends eager onnxruntime tf-function --out-dir results/runs/E/seed0/latency \\
        --out results/runs/E/seed0/latency.json --items-parquet results/runs/E/seed0/latency.parquet ...

One backend (``--backend B --out R.json --items-parquet R.parquet``): its
result. Several (``--backends ... --out-dir DIR``; the infer job of both
Snakemake and DVC, one per run, with all of config inference.backends): each
backend that answers the run's items from its framework's checkpoints is
timed in turn and written to ``DIR/<backend>.json`` (+ ``.parquet``), the
others are skipped, said so; ``--out`` is then the run's headline
(``dawnpipe.infer.summary``: the fastest backend at the threshold).
Without ``--backend``, the run's default backend (the first registered for
its framework and kind of item).

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

One backend failing does not stop the others. Whatever one backend raises
while it is prepared, checked, timed or scored (its framework missing or
broken, an export that fails, outputs that differ from the checkpoint's) is
that backend's failure: one line on stderr, ``infer: backend B failed:
REASON`` (no traceback; an unexpected exception's traceback goes to a crash
file the line names), no ``DIR/<backend>.json`` for it (a stale one from an
earlier job is removed), and an entry ``{"backend", "error", "reason"}`` in
``backends_failed`` of the run's headline ``--out``. The other backends are
timed and written as usual. Exit status: 0 when at least one backend was
measured and written (failures are in stderr and ``backends_failed``); 1
when every backend failed (nothing written, each failure named); 2 for
usage errors, and 1 for bad input found before any backend runs (run.json,
data, prices, backends that do not exist or do not read the run's
checkpoints). With one backend, its failure is thus exit 1, and the one
line is the job's error (``dawnpipe infer: error: ... every backend failed (B: REASON)``).
"""

from __future__ import annotations

import shutil
import sys
from pathlib import Path
from typing import Any

from dawnpipe import telemetry
from dawnpipe.argtypes import optional_int, seconds
from dawnpipe.data.loader import prepared_dir
from dawnpipe.display import terminal_safe
from dawnpipe.errors import DawnpipeError, UsageError, missing_package
from dawnpipe.fileio import atomic_path, write_json, write_parquet
from dawnpipe.infer.backends import Backend, backends_for, default_backend, get_backend, load_backend, names
from dawnpipe.infer.items import item_kind
from dawnpipe.infer.result import latency_record
from dawnpipe.infer.summary import write_headline
from dawnpipe.infer.throughput import BATCH_SIZES, MIN_SECONDS, measure_throughput
from dawnpipe.infer.timing import time_items
from dawnpipe.prices import load_prices, price_per_hour
from dawnpipe.runfiles import read_run_info
from dawnpipe.runinfo import cpu_model, now_iso
from dawnpipe.tasks import get_task


def configure(p) -> None:
    p.add_argument(
        "--backend",
        "--backends",
        dest="backends",
        nargs="+",
        metavar="BACKEND",
        help=f"inference backend(s) (of: {', '.join(names())}; default: the run's framework's first)",
    )
    p.add_argument("--checkpoint", required=True, type=Path, help="model.pt written by the train stage")
    p.add_argument("--run-json", required=True, type=Path, help="the run's run.json (entry, threshold, hardware)")
    p.add_argument("--data", required=True, type=Path, help="prepared data directory, or a directory of them named by task")
    p.add_argument("--prices", required=True, type=Path, help="price table (config/prices.yaml)")
    p.add_argument("--out", type=Path, help="output: the result (JSON); with --out-dir, the run's headline result")
    p.add_argument("--items-parquet", type=Path, help="output: per-item latencies and answers of --out (Parquet)")
    p.add_argument("--out-dir", type=Path, help="output: <backend>.json and <backend>.parquet of each backend (several backends)")
    p.add_argument("--threads", type=int, default=1, help="CPU threads of the framework while answering (recorded; default 1)")
    p.add_argument("--warmup", type=int, default=50, help="untimed warm-up items before timing (reported; default 50)")
    p.add_argument(
        "--throughput-batches",
        type=int,
        nargs="*",
        default=list(BATCH_SIZES),
        metavar="N",
        help=f"batch sizes whose throughput (items/s) is measured after the latency (default {' '.join(map(str, BATCH_SIZES))}; none: skip)",
    )
    p.add_argument("--throughput-seconds", type=seconds, default=MIN_SECONDS, help=f"timed seconds per batch size, at least (default {MIN_SECONDS:g})")
    p.add_argument("--device", choices=["auto", "cpu", "cuda"], default="auto", help="where to answer (auto: CUDA when present)")
    p.add_argument("--limit", type=optional_int, help="answer only the first N items (demo/test configs; null = all)")
    p.add_argument(
        "--telemetry",
        type=Path,
        help="output: hardware samples while answering, Parquet (default: none; with "
        "--out-dir, those of the headline backend, each backend's as <backend>.telemetry.parquet beside its result)",
    )
    p.add_argument("--telemetry-interval", type=seconds, default=1.0, help="seconds between hardware samples (default 1; 0 = off)")


def run(args) -> int:
    if args.threads < 1:
        raise UsageError(f"--threads must be at least 1, not {args.threads}")
    if args.warmup < 0:
        raise UsageError(f"--warmup must be non-negative, not {args.warmup}")
    if any(b < 1 for b in args.throughput_batches):
        raise UsageError(f"--throughput-batches must be at least 1, not {min(args.throughput_batches)}")
    if args.out_dir is None and (args.out is None or args.items_parquet is None):
        raise UsageError("give --out and --items-parquet (one backend), or --out-dir (several)")
    if args.out_dir is None and args.backends and len(args.backends) > 1:
        raise UsageError(f"{len(args.backends)} backends need --out-dir (one result file each)")
    if (args.out is None) != (args.items_parquet is None):
        raise UsageError("--out and --items-parquet go together")
    run_info = read_run_info(args.run_json)
    task = get_task(run_info["task"])
    kind = item_kind(task)
    framework = run_info["framework"]
    # a program run's model is its own file: ONNX or a SavedModel (dawnpipe.programs.model_files)
    model_format = (run_info.get("program") or {}).get("model_format")
    reads = f"{framework} checkpoints" if model_format is None else f"a program's {model_format} model"
    wanted = args.backends or [default_backend(framework, kind.name, model_format)]
    chosen = backends_for(framework, kind.name, wanted, model_format)
    skipped = [b for b in wanted if b not in chosen]
    if args.out_dir is None and skipped:
        get_backend(skipped[0], kind.name)  # names the kind of item it does not answer, if that is why
        raise DawnpipeError(f"{args.run_json}: a {framework} run; backend {skipped[0]} does not read {reads}")
    if skipped:
        print(terminal_safe(f"infer: skipping {', '.join(skipped)}: not for {reads} with {kind.name} items"), flush=True)
    if not chosen:
        raise DawnpipeError(f"{args.run_json}: none of the backends {', '.join(wanted)} answers a {framework} run's {kind.name} items")

    data = prepared_dir(args.data, task.name)
    usd_per_hour = price_per_hour(load_prices(args.prices), run_info.get("hardware_price_tag", run_info["hardware"]))  # one machine
    inference = kind.load(task, data, args.limit)
    results, failed = [], []
    for name in chosen:
        if args.out_dir is None:
            path, items_path, samples = args.out, args.items_parquet, args.telemetry
        else:
            path = args.out_dir / f"{name}.json"
            items_path, samples = path.with_suffix(".parquet"), (telemetry_path(path) if args.telemetry else None)
        try:
            record, per_item = measure(get_backend(name, kind.name, framework), args, run_info, task, kind, inference, usd_per_hour, samples)
        except Exception as e:  # this backend's failure, not the job's: the others are still measured
            failed.append(backend_failure(name, e, announce=len(chosen) > 1))  # alone: the job's error line names it
            if args.out_dir is not None:  # no stale result of an earlier job left standing for this backend
                for stale in (path, items_path, telemetry_path(path)):
                    stale.unlink(missing_ok=True)
            continue
        write_parquet(items_path, per_item)
        write_json(path, record)
        results.append((path, record))
    if not results:
        raise DawnpipeError(f"{args.run_json}: every backend failed (" + "; ".join(f"{f['backend']}: {f['reason']}" for f in failed) + "); nothing written")
    if args.out_dir is not None and args.out is not None:
        summary = write_headline(results, args.out, args.items_parquet, failed=failed)
        if args.telemetry:
            with atomic_path(args.telemetry) as tmp:
                shutil.copyfile(telemetry_path(Path(summary["headline_of"])), tmp)
        print(
            terminal_safe(
                f"infer: headline {summary['backend']} of {', '.join(n for n in chosen if n not in {f['backend'] for f in failed})}"
                f"{threshold_label(run_info)} -> {args.out}" + (f"; failed: {', '.join(f['backend'] for f in failed)}" if failed else "")
            ),
            flush=True,
        )
    return 0


def backend_failure(name: str, error: Exception, announce: bool = True) -> dict[str, str]:
    """Name one backend's failure on stderr in one line (an unexpected
    exception's traceback goes to a crash file, named) and return its record."""
    reason = str(error) or type(error).__name__
    if isinstance(error, ModuleNotFoundError) and (missing := missing_package(error)) is not None:
        reason = missing
    elif not isinstance(error, DawnpipeError):
        from dawnpipe.crash import crash_report  # the same crash files as the whole command's

        reason = f"{type(error).__name__}: {error}" if str(error) else type(error).__name__
        reason += f" (traceback in {crash_report('infer')})"
    if announce:
        print(f"infer: backend {name} failed: {terminal_safe(reason)}", file=sys.stderr, flush=True)
    return {"backend": name, "error": type(error).__name__, "reason": reason}


def threshold_label(run_info: dict[str, Any]) -> str:
    """' (demo threshold X; official Y)' for a run trained to a config's demo threshold, else ''."""
    if not run_info.get("demo_threshold"):
        return ""
    return f" (demo threshold {run_info['threshold']:g}; official {run_info['official_threshold']:g})"


def telemetry_path(result: Path) -> Path:
    """Where the hardware samples of one backend's timed answers go, beside its result."""
    return result.with_name(f"{result.stem}.telemetry.parquet")


def measure(backend: Backend, args, run_info: dict[str, Any], task, kind, inference, usd_per_hour, samples: Path | None) -> tuple[dict, Any]:
    """Prepare, check, time and score one backend, sampling the hardware into
    ``samples`` while it answers (when given); print what it found."""
    extra = {"calibration_items": kind.calibration_items(inference)} if backend.calibrates else {}
    topk = kind.topk(task)
    if topk > 1:
        extra["topk"] = topk
    # run.json's entry is a file's text (dvc pull, a colleague): every line and progress bar naming it shows it escaped
    entry = terminal_safe(run_info["entry"])
    print(f"infer: {entry} seed {run_info['seed']}, backend {backend.name}: preparing {terminal_safe(str(args.checkpoint))}", flush=True)
    predictor = load_backend(backend).prepare(args.checkpoint, device=args.device, threads=args.threads, check_items=inference.items, **extra)
    check = predictor.export_check
    print(
        f"infer: {backend.name} ready in {predictor.notes.get('prepare_seconds', float('nan')):.1f}s on {predictor.device}, "
        f"{predictor.threads} threads, {predictor.framework_version}"
        + (
            f"; outputs equal the checkpoint's on {check['items']} items (max |difference| {check['max_abs_diff']:.2g})"
            if check and "reference" not in check
            else ""
        )
        + (
            f"; compared with {check['reference']} on {check['items']} items (max |difference| {check['max_abs_diff']:.2g})"
            if check and "reference" in check
            else ""
        ),
        flush=True,
    )
    with telemetry.sampling(samples, args.telemetry_interval if samples else 0):
        times = time_items(
            predictor.predict, inference.items, warmup=args.warmup, sync=predictor.sync, desc=f"infer {entry} s{run_info['seed']} {backend.name}"
        )
    # after the latency and outside its hardware samples: described beside it, never ranked
    throughput = {}
    if args.throughput_batches and predictor.predict_batch is not None:
        throughput = measure_throughput(
            predictor.predict_batch,
            inference.items,
            single_answers=times.answers,
            batch_sizes=sorted(set(args.throughput_batches)),
            min_seconds=args.throughput_seconds,
            sync=predictor.sync,
            desc=f"throughput {entry} s{run_info['seed']} {backend.name}",
        )
    scored = kind.score(task, times.answers, inference)
    record, per_item = latency_record(
        run_info=run_info,
        task=task,
        kind=kind,
        predictor=predictor,
        times=times,
        scored=scored,
        usd_per_hour=usd_per_hour,
        checkpoint=args.checkpoint,
        cpu_model=cpu_model(),
        measured=now_iso(),
        throughput=throughput,
    )
    cost = record["cost_per_10k_usd"]
    print(
        f"infer: {entry} seed {record['seed']} {backend.name}: mean {record['latency_mean_ms']:.4f} ms, "
        f"p50 {record['latency_p50_ms']:.4f}, p90 {record['latency_p90_ms']:.4f}, p99 {record['latency_p99_ms']:.4f}, "
        f"max {record['latency_max_ms']:.4f} over {record['items']} items ({record['threads']} threads; "
        f"{record['warmup_items']} warm-up items excluded, mean {record['warmup_mean_ms'] or 0:.4f} ms); "
        + (f"${cost:.6f} per 10,000 items; " if cost is not None else "no price known; ")
        + f"{task.inference_accuracy_field} {task.format_metric(record['accuracy'])}"
        + ("" if record["meets_threshold"] else f" < threshold {task.format_metric(record['threshold'])}: excluded from the latency ranking")
        + threshold_label(run_info),
        flush=True,
    )
    if throughput:
        print(
            f"infer: {entry} seed {record['seed']} {backend.name} throughput: "
            + ", ".join(f"batch {b}: {v:,.0f} items/s" for b, v in throughput["throughput_items_per_second"].items())
            + "".join(
                f"; batch {b} answers {d['answers_differing']} items differently from one at a time"
                for b, d in throughput["throughput"].items()
                if d["answers_differing"]
            ),
            flush=True,
        )
    return record, per_item
