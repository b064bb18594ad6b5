"""Telemetry overhead: the train stage with the hardware sampler on against the same stage with it off.

    python bench/telemetry_overhead.py [--entry config/entries/fastnet.yaml] [--items 3000] [--epochs 1] \\
        [--repeats 3] [--interval 1.0] [--record]

Both sides are the real stage, ``python -m dawnpipe train``, on the same entry,
seed, data and budget; one passes ``--telemetry-interval <interval>`` (the
default configuration), the other ``--telemetry-interval 0`` (no thread at
all). The time compared is the training clock each run reports in run.json.
Runs alternate (off, on, off, ...) in fresh processes; the ratio is of the
medians. The sampler should cost nothing measurable: a ratio within the
run-to-run spread of the "off" side. Prints per-run times, the spread, then
``telemetry overhead: <ratio>x`` as its last line. On a shared or busy machine
the spread is large and says more than the ratio; the load average is printed.
So it first measures the sampler's own cost directly, which load barely
changes: the CPU time of one tick (``time.thread_time``), averaged over many,
as a fraction of one core at the interval (``--tick-cost-only`` stops there).

Data: --data, by default data/prepared/fashion-mnist, made by the pipeline
when missing (bench/inputs.py). `--record` writes the tick's cost, every
run's time, the medians, the spread and the ratio, with the machine, commit
and command, to docs/measurements/telemetry_overhead.json (bench/record.py);
docs/measurements.md's table is generated from it (`make docs`).
"""

from __future__ import annotations

import argparse
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
from record import add_record_flag, shown_path, write_record  # noqa: E402

from dawnpipe.entries import read_entry_doc  # noqa: E402  (bounded and checked, as the pipeline reads it)
from dawnpipe.runfiles import read_run_info  # noqa: E402


def env() -> dict:
    e = dict(os.environ)
    e["PYTHONPATH"] = str(ROOT / "src") + os.pathsep + e.get("PYTHONPATH", "")
    return e


def train_seconds(entry: Path, data: Path, items: int, threads: int, interval: float, out: Path) -> float:
    # a threshold above 100% keeps every epoch of the budget running
    command = train_command(entry, 0, data, out, 101, stop_at_threshold=False, train_limit=items, test_limit=500, threads=threads, telemetry_interval=interval)
    subprocess.run(command, check=True, env=env(), stdout=subprocess.DEVNULL)
    return read_run_info(out / "run.json")["result"]["training_hours"] * 3600.0


def tick_cost(interval: float, ticks: int = 300) -> dict:
    """The sampler's CPU time per tick, measured directly; printed and returned."""
    from dawnpipe.telemetry.sampler import Sampler

    with tempfile.TemporaryDirectory() as tmp:
        s = Sampler(Path(tmp) / "t.parquet", 3600.0).start()  # the thread sleeps; ticks are driven here
        cpu = time.thread_time()
        for _ in range(ticks):
            s._tick()
        per_tick = (time.thread_time() - cpu) / ticks
        s.stop()
    print(
        f"sampler CPU per tick: {per_tick * 1e6:.0f} us (sources: {', '.join(v for v in s.sources.values())}); "
        f"at one tick per {interval:g} s: {100 * per_tick / interval:.3f}% of one core"
    )
    return {"ticks": ticks, "seconds_per_tick": per_tick, "sources": dict(s.sources), "core_fraction_at_interval": per_tick / interval}


def main(argv: list[str] | None = None) -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--entry", type=Path, default=ROOT / "config/entries/fastnet.yaml")
    p.add_argument("--items", type=int, default=3000, help="training items per epoch")
    p.add_argument("--epochs", type=int, default=1)
    p.add_argument("--repeats", type=int, default=3)
    p.add_argument("--interval", type=float, default=1.0, help="sampling interval of the 'on' side (seconds)")
    p.add_argument("--threads", type=int, default=os.cpu_count() or 1)
    p.add_argument("--tick-cost-only", action="store_true", help="measure the cost of one sample and stop")
    p.add_argument("--data", type=Path, default=DATA / "fashion-mnist", help="prepared Fashion-MNIST (default data/prepared/fashion-mnist, made when missing)")
    add_record_flag(p, "telemetry_overhead")
    args = p.parse_args(argv)
    argv = [__file__, *(sys.argv[1:] if argv is None else argv)]
    doc = read_entry_doc(args.entry)  # checked before anything runs
    result = {"interval_seconds": args.interval, "tick": tick_cost(args.interval)}
    if args.tick_cost_only:
        if args.record:
            write_record("telemetry_overhead", result, out_dir=args.record_dir, argv=argv)
        return
    data = ensure_prepared(args.data)
    with tempfile.TemporaryDirectory(prefix="dawnpipe-telemetry-overhead-") as tmp:
        work = Path(tmp)
        doc["hyperparameters"]["epochs"] = args.epochs  # the budget, and so the schedule, is this long
        entry = work / args.entry.name
        entry.write_text(yaml.safe_dump(doc))
        times: dict[str, list[float]] = {"off": [], "on": []}
        for i in range(args.repeats):
            for side, interval in (("off", 0.0), ("on", args.interval)):
                out = work / f"{side}-{i}"
                out.mkdir()
                t = train_seconds(entry, data, args.items, args.threads, interval, out)
                times[side].append(t)
                print(f"repeat {i + 1}/{args.repeats}  telemetry {side:<3}  {t:8.2f} s training clock  (load average {os.getloadavg()[0]:.1f})", flush=True)
        off, on = statistics.median(times["off"]), statistics.median(times["on"])
        spread = (max(times["off"]) - min(times["off"])) / off
        print(
            f"median off {off:.2f} s, on {on:.2f} s; spread of 'off' runs {100 * spread:.1f}% "
            f"({args.epochs} epoch(s) x {args.items} items, {args.threads} threads, interval {args.interval:g} s)"
        )
        print(f"telemetry overhead: {on / off:.3f}x")
    if args.record:
        result.update(
            entry=shown_path(args.entry),
            items=args.items,
            epochs=args.epochs,
            repeats=args.repeats,
            threads=args.threads,
            off_seconds=times["off"],
            on_seconds=times["on"],
            median_off_seconds=off,
            median_on_seconds=on,
            off_spread=spread,
            overhead=on / off,
        )
        write_record("telemetry_overhead", result, out_dir=args.record_dir, argv=argv)


if __name__ == "__main__":
    from dawnpipe.cli import run_command

    sys.exit(run_command("telemetry-overhead", lambda _: main(), None, prog="bench/telemetry_overhead"))
