"""Time to accuracy of the fast Fashion-MNIST entry against the DAWNBench seed
recipe (ResNet-20), on the same machine in one run: the measurement of the
fast entry's goal, at least 10x faster with a coefficient of variation of at
most 5% (docs/measurements.md).

    python bench/tta.py                       # 5 seeds of each, 93%, all the data
    python bench/tta.py --record              # ... and write docs/measurements/tta.json
    python bench/tta.py --seeds 3 --data data/prepared/fashion-mnist --out-dir results/bench-tta

Seeds 0..N-1 of both entries, alternating between the two (seed 0: fast entry
first; seed 1: seed recipe first; ...), so that slow changes in the load of
the machine hit both alike. Each run is the train stage itself
(`python -m dawnpipe train`, stopping at the threshold, its per-epoch lines on
the terminal) and its time to accuracy is what the pipeline's extract stage
computes from its log (docs/rules.md#1-training-time: training time to the
first epoch at the threshold, evaluation excluded); median and coefficient of
variation are those of the stability stage. A run that does not reach the
threshold is named and left out of its entry's median (and the median is
flagged).

Prints every seed's time, then each entry's median, coefficient of variation
and reached runs, and as its last line
`fast entry speed-up over the seed recipe: <median of the seed recipe / median of the fast entry>x`.
Exit status 0, or 1 when either entry has no run at the threshold (the last
line then says which).

Prepared data: the default --data, data/prepared/fashion-mnist, is made by
the pipeline when missing (`snakemake --cores all data/prepared/fashion-mnist`,
bench/inputs.py). The runs are kept in --out-dir (default: a temporary
directory, removed). `--record` writes every run's time and epochs, the
medians, coefficients of variation and the speed-up, with the machine, commit
and command, to docs/measurements/tta.json (bench/record.py), from which
docs/measurements.md's table is generated (`make docs`).
"""

from __future__ import annotations

import argparse
import subprocess
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path[:0] = [str(ROOT / "src"), str(ROOT / "bench")]

from inputs import DATA, ensure_prepared, env, train_command  # noqa: E402
from record import add_record_flag, write_record  # noqa: E402

from dawnpipe.display import format_hours, terminal_safe  # noqa: E402
from dawnpipe.errors import DawnpipeError  # noqa: E402
from dawnpipe.metrics.extract import extract  # noqa: E402
from dawnpipe.metrics.stability import stability  # noqa: E402

FAST = ROOT / "config/entries/fastnet.yaml"
SEED_RECIPE = ROOT / "config/entries/resnet20-dawn.yaml"


def train(entry: Path, seed: int, args, out: Path) -> dict:
    """One run of ``entry`` with ``seed`` to the threshold; its time-to-accuracy record."""
    run = out / entry.stem / f"seed{seed}"
    # from the repository's root: a program entry's workdir is relative to it (docs/programs.md)
    limits = {"train_limit": args.train_limit, "test_limit": args.test_limit, "threads": args.threads}
    command = train_command(entry.resolve(), seed, Path(args.data).resolve(), run.resolve(), args.threshold, **limits)
    done = subprocess.run(command, env=env(), cwd=ROOT)
    if done.returncode != 0:
        raise DawnpipeError(f"training {entry.stem} seed {seed} failed (exit {done.returncode}); its output is above")
    return extract(run / "train.tsv", run / "train.parquet", run / "run.json", ROOT / "config/prices.yaml")


def order(seed: int, fast: Path, seed_recipe: Path) -> list[Path]:
    """Which entry trains first for ``seed``: alternating, the fast entry first at seed 0."""
    return [fast, seed_recipe] if seed % 2 == 0 else [seed_recipe, fast]


def seconds(record: dict) -> float | None:
    hours = record["time_to_accuracy_hours"]
    return None if hours is None else hours * 3600.0


def summary_line(s: dict) -> str:
    """One line of the stability stage's summary of an entry's runs."""
    median = s["tta_median_hours"]
    parts = [f"median {format_hours(median)} ({median * 3600:.1f} s)" if median is not None else "no median"]
    if s["tta_cov"] is not None:
        parts.append(f"coefficient of variation {100 * s['tta_cov']:.1f}%")
    parts.append(f"{s['reached_runs']} of {s['runs']} seeds reached the threshold")
    return f"{s['entry']}: " + ", ".join(parts)


def speedup_line(fast: dict, slow: dict) -> tuple[str, bool]:
    """The last line: the ratio of the medians (seed recipe over fast entry), or why there is none."""
    missing = [s["entry"] for s in (fast, slow) if s["tta_median_hours"] is None]
    if missing:
        return f"fast entry speed-up over the seed recipe: none ({' and '.join(missing)} reached the threshold in no seed)", False
    ratio = slow["tta_median_hours"] / fast["tta_median_hours"]
    partial = [s["entry"] for s in (fast, slow) if s["reached_runs"] < s["runs"]]
    flag = f" (medians of the seeds at the threshold only: {', '.join(partial)} missed it in some)" if partial else ""
    return f"fast entry speed-up over the seed recipe: {ratio:.2f}x{flag}", True


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0], formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--seeds", type=int, default=5, help="seeds 0..N-1 of each entry (default 5)")
    p.add_argument("--fast", type=Path, default=FAST, help="the fast entry (default config/entries/fastnet.yaml)")
    p.add_argument("--seed-recipe", type=Path, default=SEED_RECIPE, help="the seed recipe (default config/entries/resnet20-dawn.yaml)")
    p.add_argument("--data", type=Path, default=DATA / "fashion-mnist", help="prepared Fashion-MNIST (default data/prepared/fashion-mnist, made when missing)")
    p.add_argument("--threshold", type=float, default=93.0, help="top-1 accuracy to reach, percent (default the official 93)")
    p.add_argument("--train-limit", type=int, help="first N training images only (tests; default all)")
    p.add_argument("--test-limit", type=int, help="first N test images only (tests; default all)")
    p.add_argument("--threads", type=int, help="framework threads per run (default the framework's own choice)")
    p.add_argument("--out-dir", type=Path, help="keep the runs here (default: a temporary directory)")
    add_record_flag(p, "tta")
    args = p.parse_args(argv)
    if args.seeds < 1:
        p.error(f"--seeds must be at least 1, not {args.seeds}")
    if args.fast.stem == args.seed_recipe.stem:
        p.error(f"--fast and --seed-recipe are both {args.fast.stem}")
    args.data = ensure_prepared(args.data)
    with tempfile.TemporaryDirectory(prefix="dawnpipe-bench-tta-") as tmp:
        out = args.out_dir or Path(tmp)
        records: dict[str, list[dict]] = {args.fast.stem: [], args.seed_recipe.stem: []}
        for seed in range(args.seeds):
            times = {}
            for entry in order(seed, args.fast, args.seed_recipe):
                record = train(entry, seed, args, out)
                records[entry.stem].append(record)
                times[entry.stem] = seconds(record)
            print(
                terminal_safe(f"seed {seed}: ")
                + terminal_safe(
                    ", ".join(
                        f"{name} {t:.1f} s ({records[name][-1]['epochs_to_accuracy']:g} epochs)"
                        if t is not None
                        else f"{name} did not reach {args.threshold:g}%"
                        for name, t in times.items()
                    )
                ),
                flush=True,
            )
    print(f"\nevery seed's time to {args.threshold:g}% (training clock, evaluation excluded), then the medians:")
    for name, recs in records.items():
        print(terminal_safe(f"{name}: " + ", ".join(f"seed {r['seed']} {seconds(r):.1f} s" if r["reached"] else f"seed {r['seed']} -" for r in recs)))
    fast, slow = (stability(name, records[name]) for name in (args.fast.stem, args.seed_recipe.stem))
    for s in (fast, slow):
        print(terminal_safe(summary_line(s)))
    line, ok = speedup_line(fast, slow)
    if args.record:  # first: the speed-up stays the last line
        write_record("tta", record_result(args, records, fast, slow), out_dir=args.record_dir, argv=[__file__, *(sys.argv[1:] if argv is None else argv)])
    print(terminal_safe(line))
    return 0 if ok else 1


def record_result(args, records: dict[str, list[dict]], fast: dict, slow: dict) -> dict:
    """What --record keeps: the settings, every run's time and epochs, each entry's summary and the ratio."""

    def entry(name: str, s: dict) -> dict:
        return {
            "entry": name,
            "runs": [
                {"seed": r["seed"], "reached": r["reached"], "time_to_accuracy_seconds": seconds(r), "epochs_to_accuracy": r["epochs_to_accuracy"]}
                for r in records[name]
            ],
            "median_seconds": None if s["tta_median_hours"] is None else s["tta_median_hours"] * 3600.0,
            "cov": s["tta_cov"],
            "reached_runs": s["reached_runs"],
            "runs_total": s["runs"],
        }

    ratio = slow["tta_median_hours"] / fast["tta_median_hours"] if fast["tta_median_hours"] and slow["tta_median_hours"] is not None else None
    return {
        "threshold": args.threshold,
        "seeds": args.seeds,
        "train_limit": args.train_limit,
        "test_limit": args.test_limit,
        "threads": args.threads,
        "fast": entry(args.fast.stem, fast),
        "seed_recipe": entry(args.seed_recipe.stem, slow),
        "speedup": ratio,
    }


if __name__ == "__main__":
    from dawnpipe.cli import run_command

    sys.exit(run_command("tta", lambda _: main(), None, prog="bench/tta"))
