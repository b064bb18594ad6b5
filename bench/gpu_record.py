"""The GPU check's gpu_check.json (bench/gpu_check.sh, brought back from the
device machine's $OUT) as a record of bench/record.py, so that the docs'
GPU figures are generated from what the check measured, never typed:

    python bench/gpu_record.py /work/.device/<call>/gpu_check.json      # -> docs/measurements/gpu_check.json

The record's machine, commit, date, command and load average are the device
machine's, where the check measured (the check keeps them), not those of the
machine this script runs on; its result is the check's JSON as it is. A dry
run's JSON (``--cpu-dry-run``) is refused, unless ``--allow-dry-run`` asks
for it, and then becomes ``gpu_check-cpu-dry-run.json``, never the GPU
record. A file that is not a GPU check's JSON is one line naming it and why.
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
sys.path[:0] = [str(ROOT / "src"), str(ROOT / "bench")]

from record import RECORDS, write_record  # noqa: E402

from dawnpipe.fileio import write_json  # noqa: E402

COMMAND = "bash bench/gpu_check.sh  # on the device machine: run tool, carry ['.gpu-bundle'], after bench/gpu_check.sh prepare"


def read_check(path: Path) -> dict[str, Any]:
    try:
        doc = json.loads(path.read_text(encoding="utf-8"))
    except OSError as e:
        raise SystemExit(f"gpu_record: {path}: cannot read: {e.strerror or e}") from None
    except ValueError as e:
        raise SystemExit(f"gpu_record: {path}: not JSON: {e}") from None
    if not isinstance(doc, dict) or doc.get("name") != "gpu_check":
        raise SystemExit(f"gpu_record: {path}: field 'name': not a GPU check's JSON (expected \"gpu_check\", from bench/gpu_check.sh)")
    for field in ("mode", "machine", "steps", "training", "commit"):
        if field not in doc:
            raise SystemExit(f"gpu_record: {path}: field '{field}': missing")
    return doc


def device_machine(check: dict[str, Any]) -> dict[str, Any]:
    """The record's machine (bench/record.py's keys) from the check's probe of the device machine."""
    m = check["machine"]
    gpu = m.get("gpu") or {}
    return {
        "cpu_model": m.get("cpu_model"),
        "cpu_count": m.get("cpu_count"),
        "memory_gib": m.get("memory_gib"),
        "platform": m.get("platform"),
        "python": m.get("python"),
        "torch": m.get("torch"),
        "gpus": [gpu["torch_name"]] * int(gpu.get("devices") or 1) if gpu.get("torch_name") else [],
        "cuda": m.get("cuda"),
        "driver": gpu.get("driver"),
    }


def record(path: Path, out_dir: Path, allow_dry_run: bool = False) -> Path:
    check = read_check(path)
    name = "gpu_check"
    if check["mode"] != "gpu":
        if not allow_dry_run:
            raise SystemExit(
                f"gpu_record: {path}: field 'mode': {check['mode']!r}, not a GPU run (a dry run's numbers are this CPU's; --allow-dry-run records it apart)"
            )
        name = f"gpu_check-{check['mode']}"
    written = write_record(name, check, out_dir=out_dir, argv=[str(Path(__file__)), str(path)])
    doc = json.loads(written.read_text(encoding="utf-8"))
    doc.update(
        command=COMMAND if check["mode"] == "gpu" else "bench/gpu_check.sh --cpu-dry-run",
        date=check.get("started"),
        commit=check["commit"].get("commit"),
        dirty=check["commit"].get("dirty"),
        machine=device_machine(check),
        load_average=check.get("load_average"),
    )
    write_json(written, doc)
    return written


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python bench/gpu_record.py", description=__doc__.split("\n\n")[0])
    p.add_argument("check_json", type=Path, help="gpu_check.json brought back from the device machine")
    p.add_argument("--record-dir", type=Path, default=RECORDS, help="where the record goes (default docs/measurements)")
    p.add_argument("--allow-dry-run", action="store_true", help="record a --cpu-dry-run JSON too (as gpu_check-cpu-dry-run.json)")
    args = p.parse_args(argv)
    record(args.check_json, args.record_dir, args.allow_dry_run)
    return 0


if __name__ == "__main__":
    sys.exit(main())
