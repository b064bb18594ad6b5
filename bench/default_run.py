"""The default run's wall-clock time, from nothing: what `make leaderboard`
does on a fresh machine once its environment is set up.

    python bench/default_run.py [--configfile config/x.yaml] [--keep DIR] [--record]

A fresh clone of this repository's HEAD (a temporary directory, or --keep),
with no data/ and no results/, runs `snakemake --cores all
results/leaderboard.html` (and the --configfile given) with this
interpreter's tools: fetch (from the Debian package where it is installed),
prepare, every training, inference, telemetry, export, audit and the report.
The time is the whole command's wall clock; each stage's share is summed
from the jobs' Snakemake benchmark files (`results/benchmarks/`). The
default configuration's budget is 15 minutes on 2 cores
(docs/configuration.md); the last line says whether it held:
`default run: <H:MM:SS> (<s> s) from an empty clone; budget 15 minutes: met`.

`--record` writes the total, every stage's sum and every run's time to its
threshold, with the machine, commit and command, to
docs/measurements/default_run.json (bench/record.py).
"""

from __future__ import annotations

import argparse
import csv
import json
import subprocess
import sys
import tempfile
import time
from collections import defaultdict
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path[:0] = [str(ROOT / "src"), str(ROOT / "bench")]

from inputs import env  # noqa: E402
from record import add_record_flag, write_record  # noqa: E402

from dawnpipe.display import format_hours  # noqa: E402
from dawnpipe.errors import DawnpipeError  # noqa: E402

BUDGET_S = 15 * 60


def stage_seconds(results: Path) -> dict[str, float]:
    """Seconds of each stage's jobs, summed, from Snakemake's benchmark files (results/benchmarks/<stage>/...)."""
    sums: dict[str, float] = defaultdict(float)
    for path in sorted((results / "benchmarks").rglob("*.tsv")):
        stage = path.relative_to(results / "benchmarks").parts[0].removesuffix(".tsv")
        with path.open(newline="") as f:
            for row in csv.DictReader(f, delimiter="\t"):
                sums[stage] += float(row["s"])
    return dict(sums)


def run_times(results: Path) -> list[dict]:
    """Each run's time to its threshold (the extract stage's) and epochs."""
    found = []
    for path in sorted((results / "runs").glob("*/seed*/time_to_accuracy.json")):
        tta = json.loads(path.read_text())
        hours = tta["time_to_accuracy_hours"]
        found.append(
            {
                "entry": tta["entry"],
                "seed": tta["seed"],
                "threshold": tta["threshold"],
                "reached": tta["reached"],
                "seconds": None if hours is None else hours * 3600,
                "epochs": tta["epochs_to_accuracy"],
            }
        )
    return found


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--configfile", action="append", default=[], help="a config laid over config/config.yaml (repeatable; default none)")
    p.add_argument("--keep", type=Path, help="clone into this (new) directory and keep it (default: a temporary one, removed)")
    p.add_argument("--cores", default="all", help="snakemake --cores (default all)")
    add_record_flag(p, "default_run")
    args = p.parse_args(argv)
    dirty = subprocess.run(["git", "status", "--porcelain", "--untracked-files=no"], cwd=ROOT, capture_output=True, text=True).stdout.strip()
    if dirty:
        print("default_run: the working tree has uncommitted changes; the clone runs HEAD without them", flush=True)
    with tempfile.TemporaryDirectory(prefix="dawnpipe-default-run-") as tmp:
        clone = args.keep or Path(tmp) / "dawnpipe"
        if clone.exists():
            raise DawnpipeError(f"--keep {clone}: already exists; give a new directory")
        subprocess.run(["git", "clone", "--quiet", str(ROOT), str(clone)], check=True)
        command = ["snakemake", "--cores", args.cores, "results/leaderboard.html", *(w for f in args.configfile for w in ("--configfile", f))]
        print(f"default_run: {' '.join(command)} in a fresh clone ({clone})", flush=True)
        started = time.perf_counter()
        done = subprocess.run(command, cwd=clone, env=env())
        seconds = time.perf_counter() - started
        if done.returncode != 0:
            raise DawnpipeError(f"snakemake failed (exit {done.returncode}) after {seconds:.0f} s; its output is above")
        stages = stage_seconds(clone / "results")
        runs = run_times(clone / "results")
    for stage, s in sorted(stages.items(), key=lambda kv: -kv[1]):
        print(f"  {stage:<20} {s:8.1f} s (its jobs, summed)")
    for r in runs:
        shown = f"{r['seconds']:.1f} s to {r['threshold']:g}% at epoch {r['epochs']:g}" if r["reached"] else f"did not reach {r['threshold']:g}%"
        print(f"  run {r['entry']} seed {r['seed']}: {shown}")
    met = seconds <= BUDGET_S
    if args.record:
        result = {
            "configfiles": args.configfile,
            "cores": args.cores,
            "seconds": seconds,
            "budget_seconds": BUDGET_S,
            "budget_met": met,
            "stages": stages,
            "runs": runs,
        }
        write_record("default_run", result, out_dir=args.record_dir, argv=[__file__, *(sys.argv[1:] if argv is None else argv)])
    print(f"default run: {format_hours(seconds / 3600)} ({seconds:.0f} s) from an empty clone; budget {BUDGET_S // 60} minutes: {'met' if met else 'NOT met'}")
    return 0 if met else 1


if __name__ == "__main__":
    from dawnpipe.cli import run_command

    sys.exit(run_command("default_run", lambda _: main(), None, prog="bench/default_run"))
