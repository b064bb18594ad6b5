"""Harness overhead: the pipeline's train stage against the same training loop without the harness.

    python bench/overhead.py [--entry config/entries/fastnet.yaml] [--items 12000] [--epochs 2] [--record]

Both sides train the same model (same entry, seed, data and batches) for the
same epochs with the very same code: the bare side builds the train stage's
own trainer (dawnpipe.train.torch_trainer.ImageTrainer: its data on the
device, its normalisation, augmentation and per-step learning rate) and
times its ``epoch`` calls as the stage's clock does (after a sync, around
the epoch's steps alone), with nothing else around them: no evaluation,
logging, checkpoints, interruption guard or hardware sampler. The pipeline
side is the real stage, ``python -m dawnpipe train``, as the workflow runs it
(the sampler on, one sample a second), and its time is the training clock of
run.json. So the ratio is what the harness costs the steps, and nothing else.

Runs go in pairs (bare and pipeline, in turns first) in fresh processes; each
pair gives a ratio, and the overhead is the median of the pairs' ratios with
its distribution-free interval (bench/pairs.py: 90% or more). Pairs are added
until the interval's half-width is within --precision (1.5% of the ratio: half
the 3% the target allows) or --max-repeats pairs have run. Target: at most
1.03. Its last line is ``harness overhead: <ratio>x [<low>, <high>]``.

Data: --data, by default data/prepared/fashion-mnist, made by the pipeline
when missing (bench/inputs.py). `--record` writes every run's time, the
pairs' ratios, the interval and the repeats, with the machine, commit and
command, to docs/measurements/overhead.json (bench/record.py);
docs/measurements.md's table is generated from it (`make docs`).
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import yaml

ROOT = Path(__file__).resolve().parent.parent
sys.path[:0] = [str(ROOT / "src"), str(ROOT / "bench")]

from inputs import DATA, ensure_prepared, train_command  # noqa: E402
from pairs import add_pair_flags, check_pair_flags, run_pairs  # noqa: E402
from record import add_record_flag, shown_path, write_record  # noqa: E402

from dawnpipe.entries import read_entry_doc  # noqa: E402  (bounded and checked, as the pipeline reads it)
from dawnpipe.runfiles import read_run_info  # noqa: E402

BARE = r"""
import json, sys, time
from pathlib import Path
import torch
from dawnpipe.entries import load_entry, run_settings
from dawnpipe.tasks import get_task
from dawnpipe.train.torch_base import pick_device, seed_everything
from dawnpipe.train.torch_trainer import ImageTrainer
from dawnpipe.train.distributed import SINGLE
from dawnpipe.train.settings import RunSettings
from dawnpipe.train.cli import computing_precision
entry_path, data, items, epochs, threads, seed = sys.argv[1], Path(sys.argv[2]), int(sys.argv[3]), int(sys.argv[4]), int(sys.argv[5]), int(sys.argv[6])
torch.set_num_threads(threads)
entry = load_entry(entry_path)
task = get_task(entry["task"])
settings = RunSettings.of(run_settings(entry, seed=seed, threshold=101.0, official_threshold=task.threshold, train_limit=items, test_limit=1000, stop_at_threshold=False))
settings, _ = computing_precision(settings)  # the stage's own choice for an entry's precision: auto
gen = seed_everything(seed)
trainer = ImageTrainer(settings, data, rank=SINGLE, gen=gen, device=pick_device(entry["device"], SINGLE))


class Always:  # the stage's Steps without its interruption guard: every step runs
    def keep_going(self, step):
        return True


total = 0.0
for epoch in range(epochs):
    trainer.sync()
    t0 = time.perf_counter()
    trainer.epoch(epoch, Always())
    trainer.sync()
    total += time.perf_counter() - t0
print(json.dumps({"seconds": total}))
"""


def env() -> dict:
    e = dict(os.environ)
    e["PYTHONPATH"] = str(ROOT / "src") + os.pathsep + e.get("PYTHONPATH", "")
    return e


def short_entry(entry: Path, epochs: int, out: Path) -> Path:
    """A copy of the entry whose budget (and so its schedule) is ``epochs`` long."""
    doc = read_entry_doc(entry)
    doc["hyperparameters"]["epochs"] = epochs
    short = out / entry.name
    short.write_text(yaml.safe_dump(doc))
    return short


def pipeline_seconds(entry: Path, data: Path, items: int, epochs: int, threads: int, seed: int, out: Path) -> float:
    # a threshold above 100% keeps every epoch of the (shortened) budget running
    short = short_entry(entry, epochs, out)
    # the hardware sampled every second, as the workflow runs it (config telemetry.interval_s)
    command = train_command(short, seed, data, out, 101.0, stop_at_threshold=False, train_limit=items, test_limit=1000, threads=threads, telemetry_interval=1)
    subprocess.run(command, check=True, env=env(), stdout=subprocess.DEVNULL)
    run = out / "run.json"
    return read_run_info(run)["result"]["training_hours"] * 3600.0


def bare_seconds(entry: Path, data: Path, items: int, epochs: int, threads: int, seed: int, out: Path) -> float:
    short = short_entry(entry, epochs, out)  # the same schedule as the pipeline's
    proc = subprocess.run(
        [sys.executable, "-c", BARE, str(short), str(data), str(items), str(epochs), str(threads), str(seed)],
        check=True,
        env=env(),
        capture_output=True,
        text=True,
    )
    return json.loads(proc.stdout.strip().splitlines()[-1])["seconds"]


def main(argv: list[str] | None = None) -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--entry", type=Path, default=ROOT / "config/entries/fastnet.yaml")
    p.add_argument("--items", type=int, default=12000, help="training items per epoch")
    p.add_argument("--epochs", type=int, default=2)
    add_pair_flags(p)
    p.add_argument("--threads", type=int, default=os.cpu_count() or 1)
    p.add_argument("--data", type=Path, default=DATA / "fashion-mnist", help="prepared Fashion-MNIST (default data/prepared/fashion-mnist, made when missing)")
    add_record_flag(p, "overhead")
    args = p.parse_args(argv)
    check_pair_flags(p, args)
    read_entry_doc(args.entry)  # checked before anything runs
    data = ensure_prepared(args.data)
    with tempfile.TemporaryDirectory(prefix="dawnpipe-overhead-") as tmp:
        work = Path(tmp)

        def side(name: str, fn):
            def run(i: int) -> tuple[float, str]:
                out = work / f"{name}-{i}"
                out.mkdir()
                return fn(args.entry, data, args.items, args.epochs, args.threads, 0, out), "training clock"

            return run

        pairs = run_pairs([("bare loop", side("bare-loop", bare_seconds)), ("pipeline", side("pipeline", pipeline_seconds))], args)
    b, q = statistics.median(pairs.first), statistics.median(pairs.second)
    print(
        f"median bare loop {b:.2f} s, pipeline {q:.2f} s ({args.epochs} epochs x {args.items} items, {args.threads} threads, {len(pairs.first)} pairs, {time.strftime('%Y-%m-%d')})"
    )
    if args.record:  # first: the ratio stays the last line
        result = {
            "entry": shown_path(args.entry),
            "items": args.items,
            "epochs": args.epochs,
            "threads": args.threads,
            "bare_seconds": pairs.first,
            "pipeline_seconds": pairs.second,
            "median_bare_seconds": b,
            "median_pipeline_seconds": q,
            **pairs.fields(),
        }
        write_record("overhead", result, out_dir=args.record_dir, argv=[__file__, *(sys.argv[1:] if argv is None else argv)])
    print(f"harness overhead: {pairs.shown()}")


if __name__ == "__main__":
    from dawnpipe.cli import run_command

    sys.exit(run_command("overhead", lambda _: main(), None, prog="bench/overhead"))
