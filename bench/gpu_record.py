"""The GPU check's gpu_check.json (bash bench/gpu_check.sh --out DIR) as a
record of bench/record.py, so that the docs' GPU figures are generated from
what the check measured, never typed:

    python bench/gpu_record.py DIR/gpu_check.json        # -> docs/measurements/gpu_check.json; then make docs

The record's machine, commit, date, command and load average are those of
the GPU machine, where the check measured (the check keeps them), not those
of the machine this script runs on; its result is the check's JSON as it is.
A dry run's JSON (``--cpu-dry-run``) is refused, unless ``--allow-dry-run``
asks for it, and then becomes ``gpu_check-cpu-dry-run.json``, never the GPU
record. A file that is not a GPU check's JSON is one line naming it and why.
"""

from __future__ import annotations

import argparse
import json
import shlex
import sys
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
sys.path[:0] = [str(ROOT / "src"), str(ROOT / "bench")]

from record import RECORDS, write_record  # noqa: E402

from dawnpipe.fileio import write_json  # noqa: E402

REQUIRED = {"mode": str, "machine": dict, "steps": dict, "training": dict, "commit": dict, "invocations": list}


def read_check(path: Path) -> dict[str, Any]:
    try:
        doc = json.loads(path.read_text(encoding="utf-8"))
    except OSError as e:
        raise SystemExit(f"gpu_record: {path}: cannot read: {e.strerror or e}") from None
    except ValueError as e:
        raise SystemExit(f"gpu_record: {path}: not JSON: {e}") from None
    if not isinstance(doc, dict) or doc.get("name") != "gpu_check":
        raise SystemExit(f"gpu_record: {path}: field 'name': not a GPU check's JSON (expected \"gpu_check\", from bench/gpu_check.sh)")
    for field, kind in REQUIRED.items():
        if field not in doc:
            raise SystemExit(f"gpu_record: {path}: field '{field}': missing")
        if not isinstance(doc[field], kind):
            raise SystemExit(f"gpu_record: {path}: field '{field}': expected a {kind.__name__}, got {type(doc[field]).__name__}")
    return doc


def gpu_machine(check: dict[str, Any]) -> dict[str, Any]:
    """The record's machine (bench/record.py's keys) from the check's probe of the GPU machine."""
    m = check["machine"]
    gpu = m.get("gpu") or {}
    torch = m.get("torch") or {}
    return {
        "cpu_model": m.get("cpu_model"),
        "cpu_count": m.get("cpu_count"),
        "memory_gib": m.get("memory_gib"),
        "platform": m.get("platform"),
        "python": m.get("python"),
        "torch": torch.get("version"),
        "gpus": [gpu["name"]] * int(gpu.get("devices") or 1) if gpu.get("name") else [],
        "cuda": m.get("cuda"),
        "driver": m.get("driver"),
    }


def command(check: dict[str, Any]) -> str:
    """How the check was run: its first call, and the steps called again after it (the folder shown as DIR)."""

    def shown(argv: list[str]) -> str:
        words, skip = [], False
        for w in argv[1:] if argv[:1] == ["run"] else argv:
            if skip:
                words.append("DIR")
                skip = False
            elif w == "--out":
                words.append(w)
                skip = True
            elif w.startswith("--out="):
                words.append("--out=DIR")
            elif w != "--record-dir":
                words.append(w)
        return shlex.join(["bash", "bench/gpu_check.sh", *words])

    calls = [shown(i.get("argv") or []) for i in check["invocations"]]
    return calls[0] + "".join(f", then {c}" for c in calls[1:]) if calls else "bash bench/gpu_check.sh --out DIR"


def load_average(check: dict[str, Any]) -> dict[str, Any] | None:
    calls = check["invocations"]
    if not calls:
        return None
    return {"start": calls[0].get("load_average", {}).get("start"), "end": calls[-1].get("load_average", {}).get("end")}


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
    c = check["commit"]
    doc.update(
        command=command(check),
        date=check.get("started"),
        commit=c.get("commit") or c.get("bundle_commit"),
        dirty=c.get("dirty") if c.get("commit") else c.get("bundle_dirty"),
        machine=gpu_machine(check),
        load_average=load_average(check),
    )
    write_json(written, doc)
    return written


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python bench/gpu_record.py", description=__doc__.split("\n\n")[0])
    p.add_argument("check_json", type=Path, help="DIR/gpu_check.json of the GPU check")
    p.add_argument("--record-dir", type=Path, default=RECORDS, help="where the record goes (default docs/measurements)")
    p.add_argument("--allow-dry-run", action="store_true", help="record a --cpu-dry-run JSON too (as gpu_check-cpu-dry-run.json)")
    args = p.parse_args(argv)
    record(args.check_json, args.record_dir, args.allow_dry_run)
    return 0


if __name__ == "__main__":
    sys.exit(main())
