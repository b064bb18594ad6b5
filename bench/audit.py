"""Audit throughput: `dawnpipe audit` over the real public submissions and
over generated corpora of 1,000 and 10,000 submissions.

    python bench/audit.py [--entries ../shared/dawnbench-entries] [--submissions 10000] [--repeats 5] [--record]

Every measurement is a fresh ``python -m dawnpipe audit <dir>`` process, so
the times include interpreter start and imports, as a reviewer sees them.
Reported per corpus: the median wall time and the CPU time (user + system) of
the audit process; on a shared machine the CPU time shows what the wall time
would be without contention. Targets: the shared corpus (156 files) in under
1.5 s of wall time; time growing linearly with the number of files (the
per-file time of 10,000 submissions no more than that of 1,000).

The generated corpus mixes the three DAWNBench tasks; half the submissions are
training runs (JSON + a TSV of 20-120 epochs), half inference results; one in
ten carries a harmless quirk (BOM, CRLF, columns in another order, a date
like 2018-4-20, a null price) and one in fifty an error (a missing field, a
non-numeric cell, an accuracy over 100).

Prints one line per corpus, then ``audit throughput: <files per second> files/s``
(over the 10,000-submission corpus) as its last line. `--record` writes each
corpus's figures, the per-file CPU times and the throughput, with the machine,
commit and command, to docs/measurements/audit.json (bench/record.py);
docs/measurements.md's table is generated from it (`make docs`).
"""

from __future__ import annotations

import argparse
import json
import os
import random
import resource
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path[:0] = [str(ROOT / "src"), str(ROOT / "bench")]

from record import add_record_flag, shown_path, write_record  # noqa: E402

TASKS = {  # <Task>: (metric columns of the log, threshold metric, scale of accuracy)
    "CIFAR10": (["top1Accuracy"], "top1Accuracy", 100.0),
    "ImageNet": (["top1Accuracy", "top5Accuracy"], "top5Accuracy", 100.0),
    "SQuAD": (["f1Score"], "f1Score", 1.0),
}
THRESHOLD = {"CIFAR10": 94.0, "ImageNet": 93.0, "SQuAD": 0.75}


def generate(dest: Path, n: int, seed: int = 0) -> int:
    """Write ``n`` submissions under ``dest``; returns the number of files."""
    rng = random.Random(seed)
    files = 0
    for i in range(n):
        task = rng.choice(list(TASKS))
        columns, metric, scale = TASKS[task]
        quirk = rng.random() < 0.1
        broken = rng.random() < 0.02
        meta = {
            "version": "v1.0",
            "author": f"team {i % 97}",
            "authorEmail": f"t{i % 97}@example.org",
            "framework": rng.choice(["PyTorch 1.0", "TensorFlow 1.12", "MXNet 1.3"]),
            "codeURL": "https://example.org/code",
            "model": f"ResNet-{rng.choice([9, 18, 50, 152])}",
            "hardware": rng.choice(["1 V100", "8 V100", "TPUv2", "16 CPU"]),
            "costPerHour": round(rng.uniform(0.5, 30), 3),
            "timestamp": f"2018-{rng.randint(1, 12):02d}-{rng.randint(1, 28):02d}",
            "misc": {"batchSize": rng.choice([128, 256, 512])},
        }
        if quirk:
            kind = rng.choice(["date", "null"])
            if kind == "date":
                meta["timestamp"] = "2018-4-20"
            else:
                meta["costPerHour"] = None
        if broken:
            meta.pop("author")
        name = f"team{i % 97}_model{i}_{meta['hardware'].replace(' ', '')}_{meta['framework'].split()[0].lower()}"
        if i % 2 == 0:
            d = dest / task / "train"
            d.mkdir(parents=True, exist_ok=True)
            (d / f"{name}.json").write_text(json.dumps(meta, indent=2))
            epochs = rng.randint(20, 120)
            hours, rows = 0.0, []
            for e in range(1, epochs + 1):
                hours += rng.uniform(0.001, 0.5)
                reach = THRESHOLD[task] * (0.6 + 0.45 * e / epochs)
                values = [min(scale, reach * rng.uniform(0.97, 1.0))] * len(columns)
                if task == "ImageNet":
                    values[0] = values[1] * 0.82
                rows.append([str(e), repr(hours), *(f"{v:.4f}" for v in values)])
            header = ["epoch", "hours", *columns]
            if quirk and rng.random() < 0.5:
                header = [header[1], header[0], *header[2:]]
                rows = [[r[1], r[0], *r[2:]] for r in rows]
            if broken:
                rows[rng.randrange(len(rows))][1] = "n/a"
            text = "\n".join("\t".join(r) for r in [header, *rows]) + "\n"
            if quirk and rng.random() < 0.5:
                text = "\ufeff" + text.replace("\n", "\r\n")
            (d / f"{name}.tsv").write_text(text, encoding="utf-8")
            files += 2
        else:
            d = dest / task / "inference"
            d.mkdir(parents=True, exist_ok=True)
            price = meta.pop("costPerHour") or 1.0
            latency = rng.uniform(0.1, 50)
            meta.update(latency=latency, cost=latency / 3.6e6 * price, **{metric: round(THRESHOLD[task] * rng.uniform(1.0, 1.02), 4 if scale == 1 else 2)})
            if broken:
                meta[metric] = 104.0 if scale == 100 else 75.0
            (d / f"{name}.json").write_text(json.dumps(meta, indent=2))
            files += 1
    return files


def audit_once(path: Path) -> tuple[float, float, int]:
    """(wall seconds, CPU seconds, exit code) of one audit process."""
    env = dict(os.environ, PYTHONPATH=str(ROOT / "src") + os.pathsep + os.environ.get("PYTHONPATH", ""))
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    start = time.perf_counter()
    proc = subprocess.run([sys.executable, "-m", "dawnpipe", "audit", str(path)], env=env, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
    wall = time.perf_counter() - start
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    if proc.returncode not in (0, 1):
        sys.exit(f"audit of {path} failed ({proc.returncode}):\n{proc.stderr}")
    cpu = (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)
    return wall, cpu, proc.returncode


def measure(label: str, path: Path, files: int, repeats: int, measured: list[dict]) -> tuple[float, float]:
    """Median wall and CPU seconds of ``repeats`` audits of ``path``; printed, and appended to ``measured``."""
    runs = [audit_once(path) for _ in range(repeats)]
    wall = statistics.median(r[0] for r in runs)
    cpu = statistics.median(r[1] for r in runs)
    print(
        f"{label}: {files:,} files, wall {wall:.3f} s (median of {repeats}; min {min(r[0] for r in runs):.3f}), "
        f"CPU {cpu:.3f} s, {files / wall:,.0f} files/s wall, exit code {runs[0][2]}",
        flush=True,
    )
    measured.append(
        {
            "corpus": label,
            "files": files,
            "repeats": repeats,
            "wall_seconds_median": wall,
            "wall_seconds_min": min(r[0] for r in runs),
            "cpu_seconds_median": cpu,
            "exit_code": runs[0][2],
        }
    )
    return wall, cpu


def main(argv: list[str] | None = None) -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument(
        "--entries",
        type=Path,
        default=ROOT.parent / "shared" / "dawnbench-entries",
        help="the shared corpus of real submissions (default: ../shared/dawnbench-entries)",
    )
    p.add_argument("--submissions", type=int, default=10_000, help="size of the large generated corpus")
    p.add_argument("--repeats", type=int, default=5, help="audits of the shared corpus (the median counts)")
    add_record_flag(p, "audit")
    args = p.parse_args(argv)
    measured: list[dict] = []
    shared_verdict = None
    print(f"load average before: {' '.join(f'{x:.2f}' for x in os.getloadavg())} on {os.cpu_count()} CPUs", flush=True)
    if args.entries.is_dir():
        files = sum(1 for q in args.entries.rglob("*") if q.suffix in (".json", ".tsv"))
        wall, cpu = measure("shared corpus", args.entries, files, args.repeats, measured)
        verdict = "meets" if wall < 1.5 else ("misses (CPU time meets it: the machine is shared)" if cpu < 1.5 else "misses")
        print(f"shared corpus: {wall:.3f} s wall against the 1.5 s target: {verdict}", flush=True)
        shared_verdict = verdict
    else:
        print(f"shared corpus: {args.entries} is absent; skipped", flush=True)
    with tempfile.TemporaryDirectory(prefix="dawnpipe-bench-audit-") as tmp:
        tiny, small, large = Path(tmp) / "tiny", Path(tmp) / "small", Path(tmp) / "large"
        tiny_files = generate(tiny, 2, seed=0)
        small_files = generate(small, args.submissions // 10, seed=1)
        large_files = generate(large, args.submissions, seed=2)
        _, fixed_cpu = measure("generated 2 submissions (start-up cost)", tiny, tiny_files, 3, measured)
        _, small_cpu = measure(f"generated {args.submissions // 10:,} submissions", small, small_files, 1, measured)
        large_wall, large_cpu = measure(f"generated {args.submissions:,} submissions", large, large_files, 1, measured)
        per_small = (small_cpu - fixed_cpu) / small_files
        per_large = (large_cpu - fixed_cpu) / large_files
        print(
            f"CPU per file after start-up: {1e3 * per_small:.3f} ms ({args.submissions // 10:,} submissions), "
            f"{1e3 * per_large:.3f} ms ({args.submissions:,}): {per_large / per_small:.2f}x (1 or less: time grows at most linearly)",
            flush=True,
        )
    print(f"audit throughput: {large_files / large_wall:.0f} files/s")
    if args.record:
        result = {
            "entries": shown_path(args.entries) if args.entries.is_dir() else None,
            "submissions": args.submissions,
            "corpora": measured,
            "shared_corpus_target_seconds": 1.5,
            "shared_corpus_verdict": shared_verdict,
            "cpu_ms_per_file": {"small": 1e3 * per_small, "large": 1e3 * per_large},
            "files_per_second": large_files / large_wall,
        }
        write_record("audit", result, out_dir=args.record_dir, argv=[__file__, *(sys.argv[1:] if argv is None else argv)])


if __name__ == "__main__":
    main()
