"""export: our own runs as DAWNBench v1 submissions, to be audited (and
submitted) like anyone's.

    python -m dawnpipe export --runs results/runs/E/seed0 results/runs/E/seed1 ... \\
        --out results/submissions [--author dawnpipe --author-email dawnpipe@example.org]

Writes, per run, ``<Task>/train/<author>_<entry>-seed<k>_<hardware>_<framework>.json``
and ``.tsv`` (the run's own per-epoch log, byte for byte), and per inference
result of the run ``<Task>/inference/<same name>-<backend>-<threads>t.json``.
The model slot of the DAWNBench name holds the entry id and the seed because
one entry is run with several seeds and each run is a submission of its own;
the JSON's ``model`` field holds the model's name.

``misc.dawnpipe`` says where each file came from (``source``: runs/<entry>/seed<k>)
and repeats the run's own figures (time and epochs to its threshold, which
may be a demo threshold). The auditor checks those claims against the TSV,
and the leaderboard uses ``source`` to show a run once when it is given both
as a run and as this export. The export is written beside ``--out`` and
moved into place whole; ``--out`` is replaced only if it is an earlier export.
"""

from __future__ import annotations

import os
import re
import shutil
import tempfile
from pathlib import Path
from typing import Any

from dawnpipe.display import terminal_safe
from dawnpipe.errors import DawnpipeError, UsageError
from dawnpipe.fileio import write_json, write_text
from dawnpipe.runfiles import latency_files, read_run_file, read_run_info, run_dirs, run_source
from dawnpipe.tasks import get_task

MARKER = ".dawnpipe-export"  # hidden: the auditor does not look at it
FRAMEWORK_NAMES = {"pytorch": "PyTorch", "tensorflow": "TensorFlow"}


def slug(text: Any) -> str:
    """One part of a DAWNBench file name: no '_' (it separates the parts), no path characters."""
    return re.sub(r"[^A-Za-z0-9.-]+", "-", str(text)).strip("-.") or "unknown"


def base_name(author: str, run: dict[str, Any]) -> str:
    return "_".join([slug(author), f"{slug(run['entry'])}-seed{int(run['seed'])}", slug(run["hardware"]), slug(run["framework"])])


def _framework(run: dict[str, Any]) -> str:
    env = run.get("environment", {})
    name = FRAMEWORK_NAMES.get(run["framework"], run["framework"])
    version = env.get("framework_version")
    return f"{name} {version}" if version else name


def _hardware(run: dict[str, Any]) -> str:
    env = run.get("environment", {})
    parts = [env.get("cpu_model") or "unknown CPU", f"{env.get('cpu_count') or '?'} CPUs"]
    if env.get("gpus"):
        parts.append(f"{len(env['gpus'])} x {env['gpus'][0]}")
    return f"{run['hardware']} ({', '.join(parts)})"


def _common(run: dict[str, Any], author: str, email: str, usd_per_hour: float | None) -> dict[str, Any]:
    doc = {
        "version": "v1.0",
        "author": author,
        "authorEmail": email,
        "framework": _framework(run),
        "model": run["model"],
        "hardware": _hardware(run),
        "timestamp": run["finished"][:10],
    }
    if usd_per_hour is not None:
        doc["costPerHour"] = usd_per_hour
    return doc


def _provenance(run: dict[str, Any]) -> dict[str, Any]:
    env = run.get("environment", {})
    return {
        "source": run_source(run),
        "entry": run["entry"],
        "seed": int(run["seed"]),
        "configHash": run.get("config_hash"),
        "dataManifestSha256": run.get("data_manifest_sha256"),
        "gitCommit": (env.get("git") or {}).get("commit"),
        "threshold": float(run["threshold"]),
        "officialThreshold": float(run["official_threshold"]),
        "demoThreshold": bool(run["demo_threshold"]),
    }


def train_submission(run: dict[str, Any], tta: dict[str, Any], author: str, email: str) -> dict[str, Any]:
    doc = _common(run, author, email, tta.get("usd_per_hour"))
    prov = _provenance(run)
    if tta["reached"]:
        prov.update(
            timeToAccuracyHours=tta["time_to_accuracy_hours"],
            epochsToAccuracy=tta["epochs_to_accuracy"],
            wallTimeToAccuracyHours=tta.get("wall_time_to_accuracy_hours"),
        )
    result = run.get("result", {})
    entry = (run.get("settings") or {}).get("entry", {})
    env = run.get("environment", {})
    doc["misc"] = {
        "dawnpipe": prov,
        "description": entry.get("description", ""),
        "hyperparameters": entry.get("hyperparameters", {}),
        "trainItems": result.get("train_items"),
        "testItems": result.get("test_items"),
        "timing": "hours are training-clock hours: evaluation and checkpointing excluded",
        "environment": {k: env.get(k) for k in ("python", "framework_version", "device", "threads", "cpu_model", "cpu_count")},
    }
    if run.get("program"):  # somebody's program: what ran, what it claimed, what dawnpipe measured, and whether it is ranked
        program = run["program"]
        doc["misc"]["program"] = {
            k: program.get(k) for k in ("contract", "command", "source", "model_format", "claims", "verified_epoch", "excluded", "clock", "startup_seconds")
        }
    return doc


def inference_submission(run: dict[str, Any], latency: dict[str, Any], author: str, email: str) -> dict[str, Any]:
    task = get_task(run["task"])
    price = latency.get("usd_per_hour")
    doc = _common(run, author, email, price)
    doc["latency"] = latency["latency_mean_ms"]
    if price is not None:
        doc["cost"] = latency["latency_mean_ms"] / 3_600_000.0 * price  # USD per item
    doc[task.inference_accuracy_field] = latency["accuracy"]
    prov = _provenance(run)
    prov.update(
        backend=latency["backend"],
        threads=int(latency["threads"]),
        device=latency.get("device"),
        items=int(latency["items"]),
        officialItems=int(latency.get("official_items") or task.inference_items),
        warmupItems=latency.get("warmup_items"),
        **{f"latency{p}Ms": latency.get(f"latency_{p.lower()}_ms") for p in ("P50", "P90", "P99", "Max")},
    )
    doc["misc"] = {"dawnpipe": prov, "timing": "mean over every item answered one at a time, warm-up excluded"}
    return doc


def export(dirs: list[Path], out: Path, author: str, email: str) -> list[Path]:
    """Write the export into a new directory beside ``out``, then put it in place."""
    out = Path(out)
    if out.exists() and not (out / MARKER).exists() and any(out.iterdir()):
        raise DawnpipeError(f"{out}: exists and is not an earlier dawnpipe export; not replaced (choose another --out)")
    out.parent.mkdir(parents=True, exist_ok=True)
    tmp = Path(tempfile.mkdtemp(prefix=f".{out.name}.", suffix=".tmp", dir=out.parent))
    try:
        written = []
        for run_dir in dirs:
            written += _export_run(Path(run_dir), tmp, author, email)
        write_text(tmp / MARKER, "written by `dawnpipe export`; this directory is replaced whole on the next export\n")
        _swap(tmp, out)
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    return [out / p.relative_to(tmp) for p in written]


def _export_run(run_dir: Path, dest: Path, author: str, email: str) -> list[Path]:
    for name in ("run.json", "time_to_accuracy.json", "train.tsv"):
        if not (run_dir / name).is_file():
            raise DawnpipeError(f"{run_dir}: missing {name} (did the train and extract stages run?)")
    run = read_run_info(run_dir / "run.json")
    tta = read_run_file(run_dir / "time_to_accuracy.json", "time_to_accuracy")
    task = get_task(run["task"])
    name = base_name(author, run)
    train_dir = dest / task.submission_dir / "train"
    written = [train_dir / f"{name}.json", train_dir / f"{name}.tsv"]
    write_json(written[0], train_submission(run, tta, author, email))
    train_dir.mkdir(parents=True, exist_ok=True)
    shutil.copyfile(run_dir / "train.tsv", written[1])
    for path in latency_files(run_dir):
        latency = read_run_file(path, "latency")
        inference_name = f"{name}-{slug(latency['backend'])}-{int(latency['threads'])}t"
        target = dest / task.submission_dir / "inference" / f"{inference_name}.json"
        if target in written:
            raise DawnpipeError(f"{path}: a second inference result for backend {latency['backend']!r} with {latency['threads']} threads in {run_dir}")
        write_json(target, inference_submission(run, latency, author, email))
        written.append(target)
    return written


def _swap(new: Path, out: Path) -> None:
    """Put ``new`` at ``out``; an earlier export is kept until the new one is in place."""
    if not out.exists():
        os.replace(new, out)
        return
    old = Path(tempfile.mkdtemp(prefix=f".{out.name}.", suffix=".old", dir=out.parent))
    os.rmdir(old)
    os.replace(out, old)
    try:
        os.replace(new, out)
    except OSError:
        os.replace(old, out)
        raise
    shutil.rmtree(old, ignore_errors=True)


def configure(p) -> None:
    p.add_argument(
        "--runs", nargs="+", required=True, type=Path, help="run directories (results/runs/<entry>/seed<k>), or a results or runs directory holding them"
    )
    p.add_argument("--out", required=True, type=Path, help="output directory (results/submissions); replaced only if it is an earlier export")
    p.add_argument("--author", default="dawnpipe", help="the submissions' author (also the first part of each file name)")
    p.add_argument("--author-email", default="dawnpipe@example.invalid", help="the submissions' authorEmail")


def run(args) -> int:
    if not args.author.strip() or not args.author_email.strip():
        raise UsageError("--author and --author-email must not be empty (DAWNBench v1 requires both)")
    dirs = run_dirs(args.runs)
    written = export(dirs, args.out, args.author.strip(), args.author_email.strip())
    trains = sum(1 for p in written if p.parent.name == "train" and p.suffix == ".json")
    inferences = sum(1 for p in written if p.parent.name == "inference")
    print(terminal_safe(f"export: {len(dirs)} runs -> {trains} training and {inferences} inference submissions in {args.out}"))
    return 0
