"""Where the result files of our own runs are (results/runs/<entry>/seed<k>/).

One place for the layout, shared by the report, the leaderboard and the
export, so a new kind of result (another inference backend) is found by all.
"""

from __future__ import annotations

from pathlib import Path

from dawnpipe.errors import UsageError


def latency_files(run_dir: Path) -> list[Path]:
    """Every inference result of a run: ``latency.json`` (the default backend)
    and ``latency-<backend>[...].json`` or ``latency/<name>.json`` for others;
    each holds its own ``backend`` and ``threads``."""
    run_dir = Path(run_dir)
    found = [run_dir / "latency.json"] if (run_dir / "latency.json").is_file() else []
    found += sorted(p for p in run_dir.glob("latency-*.json") if p.is_file())
    found += sorted(p for p in run_dir.glob("latency/*.json") if p.is_file())
    return found


def find_run_dirs(paths: list[Path]) -> list[Path]:
    """Run directories (holding run.json) given as themselves, as a results
    directory (``<path>/runs/<entry>/seed<k>``) or as a runs directory."""
    dirs: list[Path] = []
    for path in paths:
        path = Path(path)
        if (path / "run.json").is_file():
            dirs.append(path)
        elif (path / "runs").is_dir():
            dirs += sorted(p.parent for p in (path / "runs").glob("*/seed*/run.json"))
        elif path.is_dir():
            dirs += sorted(p.parent for p in path.glob("*/seed*/run.json"))
        else:
            raise UsageError(f"{path}: not a run directory, a runs directory or a results directory")
    seen, unique = set(), []
    for d in dirs:
        if d.resolve() not in seen:
            seen.add(d.resolve())
            unique.append(d)
    return unique
