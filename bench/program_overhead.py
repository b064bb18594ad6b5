"""Program harness overhead: the PyTorch example program run bare against the
same program run through dawnpipe's train stage (docs/programs.md).

    python bench/program_overhead.py [--entry config/entries/torch-fmnist.yaml] [--items 12000] [--record]

Both sides run the very same command (the entry's, its placeholders filled
with the same data, seed and threads) on the same data: the first --items
training images and --test-items test images, prepared once. The bare side is
the program alone, its output read when it ends; the harness side is
``python -m dawnpipe train`` on the entry, with a threshold above 100% so the
program runs its whole budget, every evaluated epoch scored by dawnpipe (the
program paused meanwhile) and the hardware sampled every second, as the
workflow runs it. The time compared is the program's own training clock
(its MLLOG ``time_ms``, by the rule of docs/rules.md#the-clock: run_start to
the hand-over of its last epoch's model; under dawnpipe, its freezes taken
off). Under dawnpipe that clock also counts the export of handed-over
weights (the program's factory building the model file inside the freeze:
the program's work, docs/rules.md#the-clock), which the bare side never
does; so the ratio compares training alone, the harness side's clock less
its export, and says how much slower the program trains under the harness.
The ratio with the export counted, what a program handing over weights pays
on the clock here, is printed and recorded beside it.
The bare side is given what the harness gives it: the same items, the test
split less the items kept back, in the layouts its command names.

Runs go in pairs (bare and harness, in turns first) in fresh processes; each
pair gives a ratio, and the overhead is the median of the pairs' ratios with
its distribution-free interval (bench/pairs.py: 90% or more). Pairs are added
until the interval's half-width is within --precision (1.5% of the ratio) or
--max-repeats pairs have run. Goal: at most GOAL (1.03), met when the whole
interval is at or below it, not met when the whole interval is above it,
undecided otherwise (bench/pairs.py). Its last line is
``program harness overhead: <ratio>x [<low>, <high>]``.

`--record` writes every run's time, the exports and dawnpipe's own clock of
the harness runs, the pairs' ratios, the interval (and the ratio with the
export counted) and the goal, with the machine, commit and
command, to docs/measurements/program_overhead.json (bench/record.py).
"""

from __future__ import annotations

import argparse
import os
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path

import yaml

ROOT = Path(__file__).resolve().parents[1]
sys.path[:0] = [str(ROOT / "src"), str(ROOT / "bench")]

from inputs import DATA, ensure_prepared, env, train_command  # noqa: E402
from pairs import Pairs, add_pair_flags, check_pair_flags, run_pairs  # noqa: E402
from record import add_record_flag, shown_path, write_record  # noqa: E402

from dawnpipe.entries import load_entry, read_entry_doc, run_settings  # noqa: E402
from dawnpipe.errors import DawnpipeError  # noqa: E402
from dawnpipe.programs import clock, contract, mllog_reader  # noqa: E402
from dawnpipe.runfiles import read_run_info  # noqa: E402
from dawnpipe.train.program import GivenData, program_dir  # noqa: E402
from dawnpipe.train.settings import Entry, RunSettings  # noqa: E402

ENTRY = ROOT / "config/entries/torch-fmnist.yaml"
GOAL = 1.03  # the harness may slow a program's training by 3% at most


def program_clock(output: str, contract_version: int) -> float:
    """The program's own training clock to its last epoch's hand-over, from its MLLOG (its time_ms alone; nothing frozen)."""
    timeline = mllog_reader.Timeline()
    for number, text in enumerate(output.splitlines(), 1):
        event = mllog_reader.parse(text, number)
        if event is not None:
            timeline.add(event, event.time_ms / 1000.0)
    rule = clock.ClockRule(contract_version)
    for e in timeline.epochs.values():
        if e.eval_start is not None and e.eval_stop is not None:
            rule.windows.append(clock.Window(e.number, e.eval_start, e.eval_stop))
            rule.bounds[e.number] = float("inf")  # no dawnpipe scoring to bound it by: the whole window, as the harness allows an honest one
    handed = [e.stop if contract_version >= 2 else e.eval_stop for e in timeline.epochs.values() if e.number > 0]
    handed = [h for h in handed if h is not None]
    if timeline.run_start is None or not handed:
        raise DawnpipeError("the bare program handed over no epoch")
    return rule.training_seconds(timeline.run_start, handed[-1])[1]


def bare_seconds(entry: Entry, given: GivenData, work: Path, seed: int, threads: int, out: Path) -> float:
    models, state = out / "models", out / "state"
    models.mkdir(parents=True)
    state.mkdir()
    values = {
        "data": str(given.directory),
        "out": str(models),
        "state": str(state),
        "seed": str(seed),
        "threshold": "101",
        "device": "cpu",
        "threads": str(threads),
    }
    for kind in contract.DATA_LAYOUTS:
        if kind in contract.named_placeholders(entry.program):
            values[kind] = str(given.layout(kind, work, entry.task))
    command, extra = contract.fill(entry.program, values, entry.hyperparameters)
    run_env = {**env(), "OMP_NUM_THREADS": str(threads), "MKL_NUM_THREADS": str(threads), "PYTHONUNBUFFERED": "1", **extra}  # as the harness sets them
    proc = subprocess.run(command, cwd=program_dir(entry), env=run_env, capture_output=True, text=True)
    if proc.returncode != 0:
        raise DawnpipeError(f"the bare program failed (exit {proc.returncode}): {proc.stderr.strip().splitlines()[-1:]}")
    return program_clock(proc.stdout + "\n" + proc.stderr, int(entry.program.get("contract", 1)))


def harness_seconds(entry_file: Path, data: Path, limits: tuple[int, int], seed: int, threads: int, out: Path) -> tuple[float, float, float]:
    """(the program's own clock, dawnpipe's clock, the export of handed-over weights counted on both) of one run
    through the train stage, on the first ``limits`` items."""
    # sampled every second, as the workflow runs it; the threshold above 100% is never reached: its whole budget
    command = train_command(entry_file, seed, data, out, 101.0, threads=threads, telemetry_interval=1, train_limit=limits[0], test_limit=limits[1])
    subprocess.run(command, check=True, env=env(), cwd=ROOT, stdout=subprocess.DEVNULL)
    program = read_run_info(out / "run.json")["program"]
    return program["clock"]["program_seconds"], program["clock"]["dawnpipe_seconds"], program["time"]["export_seconds"]


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--entry", type=Path, default=ENTRY, help="a program entry (default config/entries/torch-fmnist.yaml)")
    p.add_argument("--items", type=int, default=12000, help="training items (default 12000)")
    p.add_argument("--test-items", type=int, default=2000, help="test items each evaluation scores (default 2000)")
    p.add_argument("--epochs", type=int, help="the program's epochs (its hyperparameter epochs; default the entry's)")
    add_pair_flags(p)
    p.add_argument("--threads", type=int, default=os.cpu_count() or 1)
    p.add_argument("--data", type=Path, default=DATA / "fashion-mnist", help="prepared Fashion-MNIST (default data/prepared/fashion-mnist, made when missing)")
    add_record_flag(p, "program_overhead")
    args = p.parse_args(argv)
    check_pair_flags(p, args)
    entry = load_entry(args.entry)
    if "program" not in entry:
        p.error(f"{args.entry} is not a program entry")
    data = ensure_prepared(args.data)
    with tempfile.TemporaryDirectory(prefix="dawnpipe-program-overhead-") as tmp:
        work = Path(tmp)
        entry_file = args.entry
        if args.epochs is not None:
            doc = read_entry_doc(args.entry)
            doc["hyperparameters"]["epochs"] = args.epochs
            entry_file = work / args.entry.name
            entry_file.write_text(yaml.safe_dump(doc))
            entry = load_entry(entry_file)
        # the same items on both sides: the subset, and of it what the harness gives the program
        settings = RunSettings.of(
            run_settings(entry, seed=0, threshold=101.0, official_threshold=93.0, train_limit=args.items, test_limit=args.test_items, stop_at_threshold=False)
        )
        given = GivenData.make(data, settings, work / "given")
        clocks, ours, exports = [], [], []

        def bare(i: int) -> tuple[float, str]:
            return bare_seconds(settings.entry, given, work / "given", 0, args.threads, work / f"bare-{i}"), "(the program's clock)"

        def harness(i: int) -> tuple[float, str]:
            h, d, x = harness_seconds(entry_file, data, (args.items, args.test_items), 0, args.threads, work / f"harness-{i}")
            clocks.append(h)
            ours.append(d)
            exports.append(x)
            return h - x, f"(the program's clock {h:.2f} s less {x:.2f} s of export; dawnpipe's: {d:.2f} s)"

        pairs = run_pairs([("bare", bare), ("harness", harness)], args)
    b, h = statistics.median(pairs.first), statistics.median(pairs.second)
    verdict = pairs.goal_verdict(GOAL)
    # what a program that hands over weights pays on the clock here: its training and the export of its weights
    counted = Pairs.of(pairs.first, clocks, pairs.precision)
    if args.record:  # first: the ratio stays the last line
        result = {
            "entry": shown_path(args.entry),
            "items": args.items,
            "test_items": args.test_items,
            "epochs": entry["hyperparameters"].get("epochs"),
            "threads": args.threads,
            "bare_seconds": pairs.first,
            "harness_seconds": clocks,
            "harness_export_seconds": exports,
            "harness_training_seconds": pairs.second,
            "harness_dawnpipe_seconds": ours,
            "median_bare_seconds": b,
            "median_harness_training_seconds": h,
            "median_harness_export_seconds": statistics.median(exports),
            **pairs.fields(),
            "overhead_with_export": counted.interval.estimate,
            "interval_with_export": [counted.interval.low, counted.interval.high],
            "goal": GOAL,
            "goal_verdict": verdict,
        }
        write_record("program_overhead", result, out_dir=args.record_dir, argv=[__file__, *(sys.argv[1:] if argv is None else argv)])
    print(f"median bare {b:.2f} s, through dawnpipe {h:.2f} s of training ({args.items} items, {args.threads} threads, {len(pairs.first)} pairs)")
    print(f"with the export of its weights counted (median {statistics.median(exports):.2f} s a run): {counted.shown()}")
    print(f"goal at most {GOAL:g}: {verdict}")
    print(f"program harness overhead: {pairs.shown()}")
    return 0


if __name__ == "__main__":
    from dawnpipe.cli import run_command

    sys.exit(run_command("program_overhead", lambda _: main(), None, prog="bench/program_overhead"))
