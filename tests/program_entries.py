"""Program entries for the tests: tests/programs/fmnist_program.py (a small
program that imports nothing of dawnpipe) with one of its behaviours, and a
git repository holding it, for program.source."""

from __future__ import annotations

import subprocess
from pathlib import Path

from conftest import ROOT

PROGRAMS = ROOT / "tests/programs"
PROGRAM = PROGRAMS / "fmnist_program.py"
NET = PROGRAMS / "fmnist_net.py"
ARGS = ["--data", "{data}", "--out", "{out}", "--seed", "{seed}", "--threads", "{threads}", "--behaviour", "{hp.behaviour}", "--hidden", "{hp.hidden}"]
# program.model of the weights it hands over with --weights: its network, and what its evaluation does to an item
WEIGHTS_MODEL = {
    "factory": "fmnist_net:Net",
    "framework": "torch",
    "kwargs": {"hidden": 64},
    "preprocessing": {"scale": 1 / 255, "mean": [0.5], "std": [1.0], "layout": "NCHW"},
}


def program_entry(
    behaviour: str = "honest", script: str | None = None, *, contract: int = 1, args: tuple[str, ...] = (), layout: str = "data", **program
) -> dict:
    """An entry running the test program (by its absolute path unless ``script`` is given) with ``behaviour``,
    reading its data in ``layout`` (the placeholder it is given: data, torchvision or npz)."""
    words = [w.replace("{data}", "{" + layout + "}") for w in ARGS] + (["--layout", layout] if layout != "data" else [])
    return {
        "description": f"the test program, {behaviour}",
        "task": "fashion-mnist",
        "hardware": "local-cpu",
        "program": {"contract": contract, "command": ["python", script or str(PROGRAM), *words, "--contract", str(contract), *args], **program},
        "hyperparameters": {"behaviour": behaviour, "hidden": 64},
    }


def git(*args: str, cwd: Path | None = None) -> str:
    env = {"GIT_AUTHOR_NAME": "t", "GIT_AUTHOR_EMAIL": "t@t", "GIT_COMMITTER_NAME": "t", "GIT_COMMITTER_EMAIL": "t@t", "PATH": "/usr/bin:/bin"}
    return subprocess.run(["git", *args], cwd=cwd, check=True, capture_output=True, text=True, env=env).stdout.strip()


def program_repository(dest: Path) -> tuple[Path, str]:
    """A bare git repository whose one commit holds the test program as train.py (and its network); (its path, the commit)."""
    src = dest.with_name(dest.name + "-src")
    src.mkdir(parents=True)
    git("init", "-q", "-b", "main", cwd=src)
    (src / "train.py").write_bytes(PROGRAM.read_bytes())
    (src / "fmnist_net.py").write_bytes(NET.read_bytes())
    git("add", "train.py", "fmnist_net.py", cwd=src)
    git("commit", "-qm", "their program", cwd=src)
    commit = git("rev-parse", "HEAD", cwd=src)
    git("clone", "-q", "--bare", str(src), str(dest))
    return dest, commit


def fetched_entry(repo: Path, commit: str) -> dict:
    """The test program as a reviewer re-runs a submission's code: fetched from ``repo`` at ``commit``."""
    return program_entry("honest", script="train.py", source={"url": str(repo), "commit": commit})
