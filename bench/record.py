"""The record a bench script writes of what it measured, so that no number in
the docs is typed by hand (docs/measurements.md, docs/studies.md: `make docs`
generates their tables from these records).

    python bench/overhead.py --record        # also writes docs/measurements/overhead.json

A record is one JSON file, ``docs/measurements/<name>.json``:

    {"name": ..., "command": "python bench/overhead.py --repeats 3",
     "date": "2026-11-27T01:02:03+00:00", "commit": "<sha>", "dirty": false,
     "machine": {"cpu_model", "cpu_count", "memory_gib", "platform", "python",
                 "torch", "gpus"},
     "load_average": {"start": [1, 5, 15 min], "end": [...]},
     "result": {... what the script measured, its own keys ...}}

The load average when the script started (this module's import) and when it
wrote the record, and the cores other processes kept busy meanwhile, say
whether the machine was quiet: a measurement taken while other jobs shared
the cores is a measurement of them too. A record says ``"quiet": false`` (and
the script says so on stderr, and the docs beside its table) when the
one-minute load average at its start was above ``LOAD_CEILING`` per core
(something was running), or when other processes used more than
``FOREIGN_CEILING`` cores on average while it ran (``foreign_cores``: the
machine's busy CPU time less the script's own and its children's, over the
wall time; something ran beside it).

Written only when the script is asked to (``--record``): a test run of a bench
script never replaces the record of a real measurement. Written atomically
(a temporary file, then renamed), like every output of dawnpipe.
"""

from __future__ import annotations

import argparse
import os
import shlex
import sys
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
if str(ROOT / "src") not in sys.path:
    sys.path.insert(0, str(ROOT / "src"))

from dawnpipe.fileio import write_json  # noqa: E402
from dawnpipe.runinfo import cpu_model, git_state, now_iso  # noqa: E402

RECORDS = ROOT / "docs" / "measurements"
LOAD_AT_START = list(os.getloadavg())  # at import, i.e. when the bench script started
LOAD_CEILING = 0.5  # of the one-minute load average per core at the start, above which a machine is not quiet
FOREIGN_CEILING = 0.1  # cores, on average over the measurement, that other processes may use on a quiet machine


def _busy_cpu_seconds() -> float | None:
    """CPU seconds the whole machine has been busy (every core, user and system time; not idle, I/O wait or steal)."""
    try:
        import psutil
    except ImportError:
        return None
    t = psutil.cpu_times()
    return sum(getattr(t, name, 0.0) for name in ("user", "nice", "system", "irq", "softirq"))


def _own_cpu_seconds() -> float:
    """CPU seconds of this process and of the descendants it (or they) waited for: the measurement's own work."""
    import resource

    return sum(r.ru_utime + r.ru_stime for r in (resource.getrusage(resource.RUSAGE_SELF), resource.getrusage(resource.RUSAGE_CHILDREN)))


_START = (time.monotonic(), _busy_cpu_seconds(), _own_cpu_seconds())


def foreign_cores() -> float | None:
    """Cores other processes kept busy, on average, since the script started: the machine's busy CPU time less the
    script's own and its children's, over the wall time. The load average at the start says whether something was
    running then; this says whether something ran during the measurement."""
    wall, busy, own = time.monotonic() - _START[0], _busy_cpu_seconds(), _own_cpu_seconds() - _START[2]
    if busy is None or _START[1] is None or wall <= 0:
        return None
    return max(0.0, (busy - _START[1]) - own) / wall


def add_record_flag(parser: argparse.ArgumentParser, name: str) -> None:
    """``--record``: write the result to docs/measurements/<name>.json (``--record-dir`` elsewhere)."""
    parser.add_argument("--record", action="store_true", help=f"write the result, machine, commit and command to docs/measurements/{name}.json")
    parser.add_argument("--record-dir", type=Path, default=RECORDS, help=argparse.SUPPRESS)


def machine() -> dict[str, Any]:
    """What the measurement ran on: enough to say "on which machine" beside every number."""
    import platform

    facts: dict[str, Any] = {
        "cpu_model": cpu_model(),
        "cpu_count": os.cpu_count(),
        "memory_gib": None,
        "platform": platform.platform(),
        "python": platform.python_version(),
        "torch": None,
        "gpus": [],
    }
    facts.update(cpu_identity())
    try:
        import psutil

        facts["memory_gib"] = round(psutil.virtual_memory().total / 2**30, 1)
    except ImportError:
        pass
    try:
        import torch

        facts["torch"] = torch.__version__
        if torch.cuda.is_available():
            facts["gpus"] = [torch.cuda.get_device_name(i) for i in range(torch.cuda.device_count())]
            facts["cuda"] = torch.version.cuda
    except ImportError:
        pass
    return facts


# The instruction sets that change what a CPU measures here (bf16 autocast, int8 inference, AVX-512 kernels).
CPU_FLAGS = ("avx2", "avx512f", "avx512_vnni", "avx512_bf16", "amx_bf16", "amx_int8")


def cpu_identity() -> dict[str, Any]:
    """A virtual machine's CPU is often only "AMD EPYC": its family and model tell a Zen 4 from a Zen 5, its flags what bf16 costs."""
    fields: dict[str, str] = {}
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            key, _, value = line.partition(":")
            fields.setdefault(key.strip(), value.strip())
    except OSError:
        return {}
    flags = set(fields.get("flags", "").split())
    return {"cpu_family": fields.get("cpu family"), "cpu_model_number": fields.get("model"), "cpu_flags": [f for f in CPU_FLAGS if f in flags]}


def shown_path(path: str | os.PathLike) -> str:
    """A path as the docs show it: relative to the repository when inside it or
    beside it (``../shared/...``), else as given."""
    resolved = Path(os.path.abspath(path))  # not resolve(): ../shared may be a link to elsewhere
    return os.path.relpath(resolved, ROOT) if resolved.is_relative_to(ROOT.parent) and ROOT.parent != ROOT.anchor else str(path)


def command_line(argv: list[str] | None = None) -> str:
    """The command as a reader would type it again: ``python bench/<script> ARGS``
    (without --record and --record-dir, which say where the record goes, not what was measured)."""
    argv = list(sys.argv if argv is None else argv)
    rest, skip = [], False
    for a in argv[1:]:
        if skip:
            skip = False
        elif a == "--record-dir":
            skip = True
        elif a != "--record" and not a.startswith("--record-dir="):
            rest.append(a)
    return shlex.join(["python", shown_path(argv[0]), *rest])


def quiet(load: float | None = None, foreign: float | None = None) -> bool:
    """Whether the one-minute load average at the script's start was at most LOAD_CEILING per core, and other
    processes used at most FOREIGN_CEILING cores on average while it ran (where that could be measured)."""
    calm_start = (LOAD_AT_START[0] if load is None else load) <= LOAD_CEILING * (os.cpu_count() or 1)
    return calm_start and (foreign is None or foreign <= FOREIGN_CEILING)


def write_record(name: str, result: dict[str, Any], *, out_dir: Path = RECORDS, argv: list[str] | None = None) -> Path:
    """Write ``result`` with the machine, commit, date and command to ``out_dir/<name>.json``; its path."""
    git = git_state(ROOT)
    foreign = foreign_cores()
    record = {
        "name": name,
        "command": command_line(argv),
        "date": now_iso(),
        "commit": git["commit"],
        "dirty": git["dirty"],
        "machine": machine(),
        "load_average": {"start": LOAD_AT_START, "end": list(os.getloadavg())},
        "foreign_cores": foreign,
        "quiet": quiet(foreign=foreign),
        "load_ceiling": LOAD_CEILING * (os.cpu_count() or 1),
        "foreign_ceiling": FOREIGN_CEILING,
        "result": result,
    }
    if not record["quiet"]:
        print(
            f"record: the machine was not quiet (load {LOAD_AT_START[0]:.2f} at the start, ceiling {record['load_ceiling']:g}; "
            f"other processes used {'unknown' if foreign is None else f'{foreign:.2f}'} cores on average while it ran, "
            f"ceiling {FOREIGN_CEILING:g}): the record says so",
            file=sys.stderr,
            flush=True,
        )
    path = Path(out_dir) / f"{name}.json"
    write_json(path, record)
    print(f"record: {path}", file=sys.stderr, flush=True)  # stdout's last line stays the measurement
    return path
