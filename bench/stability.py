"""Stability of one entry over seeds (an analysis metric,
docs/rules.md#analysis-metrics): its time to accuracy per seed, the median,
the coefficient of variation and the share of seeds that reach the threshold.
Any entry, a program entry too.

    python bench/stability.py config/entries/torch-fmnist.yaml --seeds 5 [--record]

Seeds 0..N-1, one after another, each run the train stage itself (`python -m
dawnpipe train`, stopping at the threshold, its per-epoch lines on the
terminal); each time is what the extract stage computes from the run's log
and the summary is the stability stage's (bench/tta.py's helpers). A program
entry's time is dawnpipe's clock of its first verified epoch
(docs/programs.md). Its last line is
`<entry>: median <H:MM:SS> (<s> s), coefficient of variation <x>%, <k> of <n> seeds reached the threshold`.

`--record` writes every seed's time and the summary, with the machine,
commit and command, to docs/measurements/stability-<entry>.json
(bench/record.py), from which docs/programs.md's table is generated.
"""

from __future__ import annotations

import argparse
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path[:0] = [str(ROOT / "src"), str(ROOT / "bench")]

from inputs import DATA, ensure_prepared  # noqa: E402
from record import add_record_flag, shown_path, write_record  # noqa: E402
from tta import seconds, summary_line, train  # noqa: E402

from dawnpipe.display import terminal_safe  # noqa: E402
from dawnpipe.entries import load_entry  # noqa: E402
from dawnpipe.metrics.stability import stability  # noqa: E402


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("entry", type=Path, help="entry file (config/entries/<id>.yaml)")
    p.add_argument("--seeds", type=int, default=5, help="seeds 0..N-1 (default 5)")
    p.add_argument("--data", type=Path, default=DATA / "fashion-mnist", help="prepared data (default data/prepared/fashion-mnist, made when missing)")
    p.add_argument("--threshold", type=float, default=93.0, help="the metric to reach (default the official 93)")
    p.add_argument("--train-limit", type=int, help="first N training items only (tests; default all)")
    p.add_argument("--test-limit", type=int, help="first N test items only (tests; default all)")
    p.add_argument("--threads", type=int, help="threads per run (default the framework's or the program's own choice)")
    p.add_argument("--out-dir", type=Path, help="keep the runs here (default: a temporary directory)")
    add_record_flag(p, "stability-<entry>")
    args = p.parse_args(argv)
    if args.seeds < 1:
        p.error(f"--seeds must be at least 1, not {args.seeds}")
    entry = load_entry(args.entry)  # checked before anything runs
    args.data = ensure_prepared(args.data)
    with tempfile.TemporaryDirectory(prefix="dawnpipe-bench-stability-") as tmp:
        out = args.out_dir or Path(tmp)
        records = []
        for seed in range(args.seeds):
            record = train(args.entry, seed, args, out)
            records.append(record)
            t = seconds(record)
            shown = f"{t:.1f} s ({record['epochs_to_accuracy']:g} epochs)" if t is not None else f"did not reach {args.threshold:g}"
            print(terminal_safe(f"seed {seed}: {entry['id']} {shown}"), flush=True)
    summary = stability(entry["id"], records)
    if args.record:  # first: the summary stays the last line
        result = {
            "entry": entry["id"],
            "entry_file": shown_path(args.entry),
            "framework": entry["framework"],
            "threshold": args.threshold,
            "seeds": args.seeds,
            "train_limit": args.train_limit,
            "test_limit": args.test_limit,
            "threads": args.threads,
            "runs": [
                {"seed": r["seed"], "reached": r["reached"], "time_to_accuracy_seconds": seconds(r), "epochs_to_accuracy": r["epochs_to_accuracy"]}
                for r in records
            ],
            "median_seconds": None if summary["tta_median_hours"] is None else summary["tta_median_hours"] * 3600.0,
            "cov": summary["tta_cov"],
            "reached_runs": summary["reached_runs"],
            "runs_total": summary["runs"],
        }
        write_record(f"stability-{entry['id']}", result, out_dir=args.record_dir, argv=[__file__, *(sys.argv[1:] if argv is None else argv)])
    print(terminal_safe(summary_line(summary)))
    return 0 if summary["reached_runs"] else 1


if __name__ == "__main__":
    from dawnpipe.cli import run_command

    sys.exit(run_command("stability", lambda _: main(), None, prog="bench/stability"))
