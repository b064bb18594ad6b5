"""Harness overhead: the pipeline's train stage against a bare training loop.

    python bench/overhead.py [--entry config/entries/fastnet.yaml] [--items 12000] [--epochs 2] [--repeats 3] [--record]

Both sides train the same model (same entry, seed, data, batches, augmentation
and optimizer) for the same epochs. The pipeline side is the real stage,
``python -m dawnpipe train``, and its time is the training clock it reports in
run.json; the bare side is the plainest loop over the same work, timed the
same way (per-epoch training only; it does no evaluation, logging or
checkpointing at all). Runs alternate (bare, pipeline, bare, ...) in fresh
processes to share the machine's state fairly; the ratio is of the medians.
Target: at most 1.03. Prints per-run times, then
``harness overhead: <ratio>x`` as its last line. The pipeline side runs as the
workflow does, with the hardware sampler on (one sample a second), so the ratio
includes telemetry; bench/telemetry_overhead.py isolates the sampler.

Data: --data, by default data/prepared/fashion-mnist, made by the pipeline
when missing (bench/inputs.py). `--record` writes every run's time, the
medians and the ratio, with the machine, commit and command, to
docs/measurements/overhead.json (bench/record.py); docs/measurements.md's
table is generated from it (`make docs`).
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

from inputs import DATA, ensure_prepared  # noqa: E402
from record import add_record_flag, shown_path, write_record  # noqa: E402

from dawnpipe.entries import read_entry_doc  # noqa: E402  (bounded and checked, as the pipeline reads it)
from dawnpipe.runfiles import read_run_info  # noqa: E402

BARE = r"""
import sys, time, json, numpy as np, torch, torch.nn.functional as F
from dawnpipe.entries import load_entry
from dawnpipe.data.loader import load_split
from dawnpipe.models.torch_zoo import build_model
from dawnpipe.models.torch_zoo import Normalizer
from dawnpipe.train.torch_base import autocast, build_optimizer, seed_everything
from dawnpipe.train.torch_trainer import augment
from dawnpipe.train.schedule import lr_at
entry_path, data, items, epochs, threads, seed = sys.argv[1], sys.argv[2], int(sys.argv[3]), int(sys.argv[4]), int(sys.argv[5]), int(sys.argv[6])
torch.set_num_threads(threads)
entry = load_entry(entry_path); hp = entry["hyperparameters"]
gen = seed_everything(seed)
split = load_split(data, "train", items)
x_all, y_all = torch.from_numpy(np.array(split.images)).unsqueeze(1), torch.from_numpy(np.array(split.labels))
x64 = x_all.double() / 255.0
norm = Normalizer(x64.mean().item(), x64.std().item(), "cpu")
model = build_model(entry["model"], in_channels=1, num_classes=10, **entry["model_args"])
fmt = torch.channels_last if hp["channels_last"] else torch.contiguous_format
model = model.to(memory_format=fmt); opt = build_optimizer(model, hp)
n, bs = x_all.shape[0], hp["batch_size"]; steps = n // bs + (1 if n % bs > 1 else 0)
total = 0.0
for epoch in range(epochs):
    model.train()
    t0 = time.perf_counter()
    perm = torch.randperm(n, generator=gen)
    for s in range(steps):
        idx = perm[s * bs:(s + 1) * bs]
        x = norm(augment(x_all[idx].float() / 255.0, hp["augment"]["crop_padding"], hp["augment"]["flip"], gen)).contiguous(memory_format=fmt)
        for g in opt.param_groups:
            g["lr"] = lr_at(epoch + s / steps, hp["lr"], hp["schedule"], hp["epochs"])
        with autocast(torch.device("cpu"), hp["precision"]):
            loss = F.cross_entropy(model(x), y_all[idx].long(), label_smoothing=hp["label_smoothing"])
        opt.zero_grad(set_to_none=True); loss.backward(); opt.step()
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
    run = out / "run.json"
    subprocess.run(
        [
            sys.executable,
            "-m",
            "dawnpipe",
            "train",
            "--entry",
            str(short),
            "--seed",
            str(seed),
            "--data",
            str(data),
            "--tsv",
            str(out / "train.tsv"),
            "--log-parquet",
            str(out / "train.parquet"),
            "--checkpoint",
            str(out / "model.pt"),
            "--run-json",
            str(run),
            "--threshold",
            "101",
            "--train-limit",
            str(items),
            "--test-limit",
            "1000",
            "--threads",
            str(threads),
            "--no-resume",
        ],
        check=True,
        env=env(),
        stdout=subprocess.DEVNULL,
    )
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
    p.add_argument("--repeats", type=int, default=3)
    p.add_argument("--threads", type=int, default=os.cpu_count() or 1)
    p.add_argument("--data", type=Path, default=DATA / "fashion-mnist", help="prepared Fashion-MNIST (default data/prepared/fashion-mnist, made when missing)")
    add_record_flag(p, "overhead")
    args = p.parse_args(argv)
    read_entry_doc(args.entry)  # checked before anything runs
    data = ensure_prepared(args.data)
    with tempfile.TemporaryDirectory(prefix="dawnpipe-overhead-") as tmp:
        work = Path(tmp)
        bare, pipe = [], []
        for i in range(args.repeats):
            for name, fn, store in (("bare loop", bare_seconds, bare), ("pipeline ", pipeline_seconds, pipe)):
                out = work / f"{name.strip().replace(' ', '-')}-{i}"
                out.mkdir()
                t = fn(args.entry, data, args.items, args.epochs, args.threads, 0, out)
                store.append(t)
                print(f"repeat {i + 1}/{args.repeats}  {name}  {t:8.2f} s training clock", flush=True)
        b, q = statistics.median(bare), statistics.median(pipe)
        print(
            f"median bare loop {b:.2f} s, pipeline {q:.2f} s ({args.epochs} epochs x {args.items} items, {args.threads} threads, {time.strftime('%Y-%m-%d')})"
        )
        print(f"harness overhead: {q / b:.3f}x")
    if args.record:
        result = {
            "entry": shown_path(args.entry),
            "items": args.items,
            "epochs": args.epochs,
            "repeats": args.repeats,
            "threads": args.threads,
            "bare_seconds": bare,
            "pipeline_seconds": pipe,
            "median_bare_seconds": b,
            "median_pipeline_seconds": q,
            "overhead": q / b,
        }
        write_record("overhead", result, out_dir=args.record_dir, argv=[__file__, *(sys.argv[1:] if argv is None else argv)])


if __name__ == "__main__":
    from dawnpipe.cli import run_command

    sys.exit(run_command("overhead", lambda _: main(), None, prog="bench/overhead"))
