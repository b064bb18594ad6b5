"""Find run results below directories, and the result files of one run.

Snakemake names every input file of an aggregate stage (it expands the
config's entries x seeds); DVC cannot (its templates interpolate scalars, not
lists), so its stability and report stages name directories instead and the
commands look inside: ``report --runs results/runs`` or
``stability --entry E results/runs/E``. The layout of one run directory
(``latency_files``) is also here, shared by the report, the leaderboard and
the export, so a new kind of result (another inference backend) is found by all.
"""

from __future__ import annotations

from collections.abc import Iterable
from pathlib import Path

from dawnpipe.errors import DawnpipeError, UsageError
from dawnpipe.fileio import read_json
from dawnpipe.schemas import jsonschema_check

# What every stage after training reads from a run's run.json.


def files_under(paths: Iterable[Path], pattern: str) -> list[Path]:
    """Each file as given; each directory replaced by the files matching
    ``pattern`` anywhere below it, in path order."""
    found: list[Path] = []
    for path in map(Path, paths):
        if not path.is_dir():
            found.append(path)  # a missing file is reported by whoever reads it
            continue
        below = sorted(p for p in path.rglob(pattern) if p.is_file())
        if not below:
            raise DawnpipeError(f"{path}: no {pattern} below this directory")
        found.extend(below)
    return found


def run_dirs(paths: Iterable[Path]) -> list[Path]:
    """Each run directory (one holding run.json) as given; any other
    directory replaced by the run directories below it, in path order."""
    found: list[Path] = []
    for path in map(Path, paths):
        if not path.exists():
            raise UsageError(f"{path}: no such run directory")
        if not path.is_dir() or (path / "run.json").is_file():
            found.append(path)
            continue
        below = sorted(p.parent for p in path.rglob("run.json"))
        if not below:
            raise DawnpipeError(f"{path}: no run directory (with run.json) below this directory")
        found.extend(below)
    return found


def read_run_file(path: Path, kind: str) -> dict:
    """A run's file of ``kind`` (run, time_to_accuracy, latency, stability,
    utilization, sensitivity; schemas/run_files.schema.yaml), read bounded and
    checked: a missing field or a value of the wrong type is named with the
    file, not a KeyError later."""
    return check_run_file(read_json(path), path, kind)


def check_run_file(doc, path: Path, kind: str) -> dict:
    """``doc`` (the content of ``path``) checked against its kind's schema."""
    schemas = jsonschema_check.package_schema("run_files")
    jsonschema_check.check(doc, {**schemas, **schemas[kind]}, str(path))  # the kinds beside it: "#/run" refers to run.json's
    return doc


def read_run_info(path: Path) -> dict:
    """A run's run.json, checked (read_run_file)."""
    return read_run_file(path, "run")


def latency_files(run_dir: Path) -> list[Path]:
    """Every inference result of a run, each with its own ``backend`` and
    ``threads``: ``latency/<backend>.json`` as the infer stage writes them
    (``latency.json`` is then the run's headline, a copy of one of them, and
    not counted twice); else ``latency.json`` and ``latency-<backend>[...].json``."""
    run_dir = Path(run_dir)
    found = sorted(p for p in run_dir.glob("latency/*.json") if p.is_file())
    if found:
        return found
    found = [run_dir / "latency.json"] if (run_dir / "latency.json").is_file() else []
    return found + sorted(p for p in run_dir.glob("latency-*.json") if p.is_file())


def run_source(info: dict) -> str:
    """How a run (its run.json) is named in leaderboards and exports: ``runs/<entry>/seed<k>``."""
    return f"runs/{info['entry']}/seed{info['seed']}"
