"""What a bench script needs before it measures, made by the pipeline's own
stages, so that every bench command of the docs works in a fresh clone
after `make setup`:

- prepared data (``ensure_prepared``): the default ``data/prepared/<task>``
  is made, when missing, by the pipeline's fetch and prepare stages,
  ``snakemake --cores all data/prepared/<task>`` run in the repository (the
  default configuration's data sources: the Debian package's files where
  installed, else the official download). A ``--data`` path of the caller's
  own is never made: a missing one stops the script, saying what to run;
- a trained checkpoint (``ensure_checkpoint``): the train stage itself,
  ``python -m dawnpipe train`` with its command from the stage table
  (``train_command``), to the task's official threshold, into a directory
  kept for the next time (``results/bench/``).

Each prints, before the work, what it runs and why.
"""

from __future__ import annotations

import os
import shlex
import shutil
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
if str(ROOT / "src") not in sys.path:
    sys.path.insert(0, str(ROOT / "src"))

from dawnpipe.errors import DawnpipeError  # noqa: E402

DATA = ROOT / "data" / "prepared"
BENCH_RUNS = ROOT / "results" / "bench"


def env() -> dict[str, str]:
    """This checkout's src first on PYTHONPATH, this interpreter's tools first on PATH."""
    e = dict(os.environ)
    e["PYTHONPATH"] = str(ROOT / "src") + os.pathsep + e.get("PYTHONPATH", "")
    e["PATH"] = str(Path(sys.executable).parent) + os.pathsep + e.get("PATH", "")
    return e


def has_prepared(path: Path, task: str) -> bool:
    """Whether ``path`` (a task's prepared data, or data/prepared/ holding it) has a manifest."""
    return (path / "manifest.json").is_file() or (path / task / "manifest.json").is_file()


def prepare_command(task: str) -> list[str]:
    """The pipeline's own way to the prepared data of ``task`` (its fetch and prepare stages)."""
    snakemake = shutil.which("snakemake", path=env()["PATH"]) or "snakemake"
    return [snakemake, "--cores", "all", f"data/prepared/{task}"]


def ensure_prepared(path: Path, task: str = "fashion-mnist") -> Path:
    """``path`` once it holds ``task``'s prepared data: the default location
    (data/prepared/<task>, or data/prepared) is made by the pipeline when
    missing; any other path must exist already."""
    path = Path(path)
    if has_prepared(path, task):
        return path
    default = path.resolve() in (DATA.resolve(), (DATA / task).resolve())
    shown = shlex.join(["snakemake", *prepare_command(task)[1:]])
    if not default:
        raise DawnpipeError(f"{path}: no prepared data for task {task}; leave out --data to have `{shown}` make data/prepared/{task}, or give a prepared copy")
    print(f"bench: no prepared data at {path}: making it with the pipeline's fetch and prepare stages: {shown}", flush=True)
    done = subprocess.run(prepare_command(task), cwd=ROOT, env=env())
    if done.returncode != 0 or not has_prepared(path, task):
        raise DawnpipeError(f"`{shown}` failed (exit {done.returncode}); its output is above")
    return path


def train_command(
    entry: Path,
    seed: int,
    data: Path,
    run: Path,
    threshold: float,
    *,
    stop_at_threshold: bool = True,
    train_limit: int | None = None,
    test_limit: int | None = None,
    threads: int | None = None,
    telemetry_interval: float | None = 0.0,
    resume: bool = False,
) -> list[str]:
    """The train stage for one run of ``entry`` into ``run``, written from the
    stage table as the pipeline writes it (dawnpipe.pipeline.stages.TRAIN: its
    outputs under their names in ``run``), never resuming unless ``resume``
    (the stage's own default): by default stopping at ``threshold``, telemetry
    off (``telemetry_interval`` None: the stage's default sampling)."""
    from dawnpipe.pipeline.stages import TRAIN, command_words, outputs_in
    from dawnpipe.pipeline.values import train_settings

    settings = train_settings(threshold, train_limit=train_limit, test_limit=test_limit, stop_at_threshold=stop_at_threshold)
    values = {
        "entry_file": entry,
        "seed": seed,
        "data": data,
        **outputs_in(TRAIN, run),
        "threads": threads,
        "settings": settings,
        "telemetry_interval": telemetry_interval,
    }
    return [sys.executable, "-m", "dawnpipe", *command_words(TRAIN, values), *([] if resume else ["--no-resume"])]


def ensure_checkpoint(entry: Path, seed: int, data: Path, threshold: float) -> Path:
    """A checkpoint of ``entry`` with ``seed`` at ``threshold``: results/bench/<entry>-seed<k>/model.pt,
    trained by the train stage when missing (or when its run did not finish)."""
    run = BENCH_RUNS / f"{entry.stem}-seed{seed}"
    checkpoint = run / "model.pt"
    if checkpoint.is_file() and (run / "run.json").is_file():
        return checkpoint
    data = ensure_prepared(data)
    command = train_command(entry, seed, data, run, threshold)
    print(f"bench: no checkpoint at {checkpoint}: training it with the train stage to {threshold:g}%: {shlex.join(command[1:])}", flush=True)
    done = subprocess.run(command, cwd=ROOT, env=env())
    if done.returncode != 0:
        raise DawnpipeError(f"training {entry.stem} seed {seed} failed (exit {done.returncode}); its output is above")
    if not checkpoint.is_file():
        raise DawnpipeError(f"{entry.stem} seed {seed} did not reach {threshold:g}%, so there is no checkpoint at {checkpoint}")
    return checkpoint
