"""The references the GPU check measures its figures against, on the card, in
the same run (steps of bench/gpu_check.sh; each writes one JSON file):

    python bench/gpu_reference.py peak --out peak.json
        a large bf16 and fp32 matrix product timed with CUDA events: the rate
        this card reaches, beside the datasheet row of peaks.yaml the
        utilization stage divides by (fp32 with TF32 off, as dawnpipe runs it);
    python bench/gpu_reference.py clock --data DIR --out-dir DIR [train options]
        an entry trained by dawnpipe's own training loop, in this process,
        with a CUDA event recorded at the start and at the end of every timed
        region (TrainingClock.running): per epoch, the training clock beside
        the events' time of the same epoch, and beside the run's train.tsv;
    python bench/gpu_reference.py latency --checkpoint model.pt --data DIR --out latency.json
        a trained model prepared by the inference backends the stage uses
        (eager, TorchScript) and answered one item at a time by the stage's
        timing loop, a CUDA event recorded just before and just after each
        item: per item, the stage's clock beside the events' time.

The events time the GPU's own timeline between two points of the stream;
dawnpipe's clocks are host clocks read after ``torch.cuda.synchronize``. A
clock that missed work still queued on the GPU reads less than the events;
one that waited on something else reads far more. Both readings and their
ratio are written; the verdicts are bench/gpu_summary.py's.

``new_event`` and ``sync`` are parameters so that the same functions run with
torch.cuda.Event on a GPU and with a stand-in in the tests (no GPU here).
"""

from __future__ import annotations

import argparse
import contextlib
import csv
import json
import math
import statistics
import sys
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
if str(ROOT / "src") not in sys.path:
    sys.path.insert(0, str(ROOT / "src"))

PRECISIONS = ("bf16", "fp32")
TRIAL_SECONDS = 0.05  # each timed trial of the matrix product: long enough for the events' 0.5 us resolution


def cuda_events() -> tuple[Callable[[], Any], Callable[[], None]]:
    """(a new timing event, wait for the device): CUDA's."""
    import torch

    if not torch.cuda.is_available():
        raise SystemExit("gpu_reference: no CUDA device (torch.cuda.is_available() is False): these references time work on a GPU")
    return (lambda: torch.cuda.Event(enable_timing=True)), torch.cuda.synchronize


def event_seconds(pairs: list[tuple[Any, Any]]) -> list[float]:
    """Seconds between each (start, end) pair of recorded events (after the device finished them)."""
    return [start.elapsed_time(end) / 1000.0 for start, end in pairs]


# ---------------------------------------------------------------- the matrix product
def matmul_rate(
    precision: str, *, n: int, device: str, new_event: Callable[[], Any], sync: Callable[[], None], trials: int = 5, target_s: float = TRIAL_SECONDS
) -> dict[str, Any]:
    """TFLOP/s of ``n`` x ``n`` matrix products in ``precision``, timed with events: the best and the median of ``trials``."""
    import torch

    dtype = {"bf16": torch.bfloat16, "fp32": torch.float32}[precision]
    gen = torch.Generator(device=device).manual_seed(0)
    a = torch.randn(n, n, device=device, dtype=dtype, generator=gen)
    b = torch.randn(n, n, device=device, dtype=dtype, generator=gen)
    c = torch.empty(n, n, device=device, dtype=dtype)
    flop = 2.0 * n**3

    def timed(repeats: int) -> float:
        start, end = new_event(), new_event()
        start.record()
        for _ in range(repeats):
            torch.matmul(a, b, out=c)
        end.record()
        sync()
        return start.elapsed_time(end) / 1000.0

    timed(2)  # warm-up: the library's choice of kernel, the clocks ramping up
    one = timed(1)
    repeats = max(1, math.ceil(target_s / max(one, 1e-9)))
    seconds = [timed(repeats) for _ in range(trials)]
    rates = [flop * repeats / s / 1e12 for s in seconds]
    return {
        "precision": precision,
        "n": n,
        "repeats": repeats,
        "trials": trials,
        "seconds": seconds,
        "tflops_best": max(rates),
        "tflops_median": statistics.median(rates),
    }


def peak(*, device: str, new_event, sync, n: int = 8192, device_name: str | None = None) -> dict[str, Any]:
    """The matrix-product rate of each precision the check's runs use, beside the datasheet row of the device."""
    import torch

    from dawnpipe.models.precision import use_ieee_fp32
    from dawnpipe.telemetry.peaks import gpu_peak

    tf32 = use_ieee_fp32()  # fp32 as dawnpipe trains and infers it: IEEE, no TF32
    name = device_name or (torch.cuda.get_device_name() if device.startswith("cuda") else None)
    row = gpu_peak(name) if name else None
    out: dict[str, Any] = {"device": device, "device_name": name, "tf32_allowed": tf32, "torch": torch.__version__, "precisions": {}}
    out["datasheet"] = {"device": row["device"], "source": row["source"]} if row else None
    for precision in PRECISIONS:
        measured = matmul_rate(precision, n=n, device=device, new_event=new_event, sync=sync)
        sheet = row.get(precision) if row else None
        measured["datasheet_tflops"] = sheet
        measured["measured_over_datasheet"] = measured["tflops_best"] / sheet if sheet else None
        out["precisions"][precision] = measured
    return out


# ---------------------------------------------------------------- the training clock
@contextlib.contextmanager
def events_around_training_clock(new_event: Callable[[], Any]) -> Iterator[list[dict[str, Any]]]:
    """While inside, every timed region of dawnpipe's training loop also records a
    CUDA event at its start and its end; yields the list of regions (clock
    seconds, events), filled as training goes."""
    from dawnpipe.train import loop

    original = loop.TrainingClock.running
    regions: list[dict[str, Any]] = []

    @contextlib.contextmanager
    def running(self):
        before = self.elapsed
        region: dict[str, Any] = {}
        with original(self):  # synchronize, start the clock ... synchronize, stop it
            region["start"] = new_event()
            region["start"].record()
            try:
                yield
            finally:
                region["end"] = new_event()
                region["end"].record()
        region["clock_s"] = self.elapsed - before
        regions.append(region)

    loop.TrainingClock.running = running
    try:
        yield regions
    finally:
        loop.TrainingClock.running = original


def tsv_epoch_seconds(path: Path) -> list[float]:
    """Training-clock seconds of each epoch from a DAWNBench TSV (cumulative hours)."""
    with open(path, encoding="utf-8") as f:
        hours = [float(r["hours"]) for r in csv.DictReader(f, delimiter="\t")]
    return [(h - before) * 3600.0 for h, before in zip(hours, [0.0, *hours[:-1]])]


def clock(train_args: list[str], out_dir: Path, *, new_event, sync) -> dict[str, Any]:
    """Train with ``dawnpipe train ARGS`` (outputs in ``out_dir``) inside events_around_training_clock."""
    from dawnpipe.cli import main as dawnpipe
    from dawnpipe.pipeline.stages import TRAIN, command_words, outputs_in

    out_dir.mkdir(parents=True, exist_ok=True)
    # the stage's outputs in out_dir, as the stage table names them; the entry, seed, data and settings are the caller's
    args = [*command_words(TRAIN, {**outputs_in(TRAIN, out_dir), "work_dir": out_dir / "work"}), *train_args]
    with events_around_training_clock(new_event) as regions:
        try:
            dawnpipe(args)
        except SystemExit as e:
            if e.code not in (0, None):
                raise SystemExit(f"gpu_reference: dawnpipe train exited {e.code}") from None
    sync()
    events = event_seconds([(r["start"], r["end"]) for r in regions])
    tsv = tsv_epoch_seconds(out_dir / "train.tsv")
    run = json.loads((out_dir / "run.json").read_text(encoding="utf-8"))
    epochs = [
        {"epoch": i + 1, "clock_s": r["clock_s"], "events_s": e, "tsv_s": tsv[i] if i < len(tsv) else None} for i, (r, e) in enumerate(zip(regions, events))
    ]
    clock_total, events_total = sum(x["clock_s"] for x in epochs), sum(events)
    return {
        "entry": run.get("entry"),
        "device": run.get("environment", {}).get("device"),
        "precision": run.get("environment", {}).get("precision") or run.get("settings", {}).get("entry", {}).get("hyperparameters", {}).get("precision"),
        "epochs": epochs,
        "clock_total_s": clock_total,
        "events_total_s": events_total,
        "tsv_total_s": sum(tsv),
        "clock_over_events": clock_total / events_total if events_total > 0 else None,
        "clock_minus_events_per_epoch_s": [x["clock_s"] - x["events_s"] for x in epochs],
    }


# ---------------------------------------------------------------- inference latency
def latency(
    checkpoint: Path, data: Path, *, backends: tuple[str, ...], device: str, warmup: int, limit: int | None, new_event, sync, stage_dir: Path | None = None
) -> dict[str, Any]:
    """Per backend: the stage's timing loop over the same model, with events around each item."""
    import importlib

    import numpy as np

    from dawnpipe.infer.backends import get_backend
    from dawnpipe.infer.items import item_kind
    from dawnpipe.infer.timing import time_items
    from dawnpipe.tasks import get_task

    task = get_task("fashion-mnist")
    kind = item_kind(task)
    inference = kind.load(task, data, limit)
    out: dict[str, Any] = {"checkpoint": str(checkpoint), "items": len(inference.items), "warmup": warmup, "backends": {}}
    for name in backends:
        predictor = importlib.import_module(get_backend(name, kind.name, "pytorch").module).prepare(
            checkpoint, device=device, threads=1, check_items=inference.items
        )
        pairs: list[tuple[Any, Any]] = []

        def predict(item, _predict=predictor.predict, _pairs=pairs):
            start, end = new_event(), new_event()
            start.record()
            answer = _predict(item)
            end.record()
            _pairs.append((start, end))
            return answer

        times = time_items(predict, inference.items, warmup=warmup, sync=predictor.sync, desc=f"latency reference {name}")
        sync()
        clock_s = times.seconds
        events = np.asarray(event_seconds(pairs[len(pairs) - clock_s.size :]))  # the warm-up items come first, then every item timed
        row = {
            "device": predictor.device,
            "items": int(clock_s.size),
            "clock_mean_ms": float(clock_s.mean() * 1e3),
            "clock_p50_ms": float(np.median(clock_s) * 1e3),
            "events_mean_ms": float(events.mean() * 1e3),
            "events_p50_ms": float(np.median(events) * 1e3),
            "clock_over_events": float(clock_s.mean() / events.mean()) if events.mean() > 0 else None,
            "items_clock_below_events": int((clock_s < events).sum()),
        }
        stage = json.loads((stage_dir / f"{name}.json").read_text(encoding="utf-8")) if stage_dir and (stage_dir / f"{name}.json").is_file() else None
        row["stage_mean_ms"] = stage["latency_mean_ms"] if stage else None
        row["stage_over_events"] = row["stage_mean_ms"] / row["events_mean_ms"] if stage and row["events_mean_ms"] > 0 else None
        out["backends"][name] = row
    return out


# ---------------------------------------------------------------- command line
def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python bench/gpu_reference.py", description=__doc__.split("\n\n")[0])
    sub = p.add_subparsers(dest="what", required=True)
    pk = sub.add_parser("peak", help="bf16 and fp32 matrix products timed with CUDA events")
    pk.add_argument("--out", type=Path, required=True)
    pk.add_argument("--n", type=int, default=8192, help="matrix size (default 8192)")
    ck = sub.add_parser("clock", help="an entry trained with CUDA events around the training clock")
    ck.add_argument("--out-dir", type=Path, required=True, help="the run's files and clock.json")
    la = sub.add_parser("latency", help="a trained model's one-item latency beside CUDA events")
    la.add_argument("--checkpoint", type=Path, required=True)
    la.add_argument("--data", type=Path, required=True, help="the prepared Fashion-MNIST directory")
    la.add_argument("--stage-dir", type=Path, help="the inference stage's latency/ directory of the same model (its figures, beside)")
    la.add_argument("--backends", nargs="+", default=["eager", "torchscript"])
    la.add_argument("--warmup", type=int, default=50)
    la.add_argument("--limit", type=int)
    la.add_argument("--out", type=Path, required=True)
    args, rest = p.parse_known_args(argv)
    if rest and args.what != "clock":
        p.error(f"unrecognized arguments: {' '.join(rest)}")
    new_event, sync = cuda_events()
    start = time.perf_counter()
    if args.what == "peak":
        doc, out = peak(device="cuda", new_event=new_event, sync=sync, n=args.n), args.out
    elif args.what == "clock":
        doc, out = clock(rest, args.out_dir, new_event=new_event, sync=sync), args.out_dir / "clock.json"
    else:
        doc = latency(
            args.checkpoint,
            args.data,
            backends=tuple(args.backends),
            device="cuda",
            warmup=args.warmup,
            limit=args.limit,
            new_event=new_event,
            sync=sync,
            stage_dir=args.stage_dir,
        )
        out = args.out
    doc["seconds"] = time.perf_counter() - start
    out.parent.mkdir(parents=True, exist_ok=True)
    tmp = out.with_name(f".{out.name}.tmp")
    tmp.write_text(json.dumps(doc, indent=1, allow_nan=False) + "\n", encoding="utf-8")
    tmp.replace(out)
    print(f"gpu_reference: {args.what}: wrote {out}", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
