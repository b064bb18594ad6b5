"""A new task is one task file plus one data module, in a directory of its
own: nothing in the package, the workflow or dvc.yaml's generator is edited.
The task here ("tiny-shapes": 4 classes of 16 x 16 grey images, stored as
.npy files and served over HTTP on 127.0.0.1) is fetched, prepared, trained
and answered through the commands, then through Snakemake and through the
DVC pipeline written for the same config, both ranking its run."""

from __future__ import annotations

import hashlib
import io
import json
import shutil
import subprocess
import textwrap
from pathlib import Path

import numpy as np
import pytest
import yaml
from conftest import ROOT, copy_project, run_cli, run_snakemake, tool_env
from local_http import serve

DATA_MODULE = '''
"""tiny-shapes: one .npy file of images and one of labels per split (uint8),
fetched like any listed files and saved in the npy-uint8 layout."""
from pathlib import Path

import numpy as np

from dawnpipe.data.arrays import save_split
from dawnpipe.data.files import fetch_listed_files
from dawnpipe.tasks.kind import DataKind


def prepare(task, raw: Path, out: Path) -> dict:
    splits = {}
    for split, spec in task.data["splits"].items():
        images = np.load(raw / spec["images"], allow_pickle=False)
        labels = np.load(raw / spec["labels"], allow_pickle=False)
        splits[split] = save_split(out, split, images, labels, task.data["classes"], spec.get("items"))
    return {"format": "npy-uint8", "classes": task.data["classes"], "splits": splits}


KIND = DataKind("shapes-npy", items="image", fetch=fetch_listed_files, prepare=prepare)
'''


def shapes(n: int, seed: int) -> tuple[np.ndarray, np.ndarray]:
    """Four easy classes: a bright square in one of four quadrants, with noise."""
    rng = np.random.default_rng(seed)
    labels = rng.integers(0, 4, n).astype(np.uint8)
    images = rng.integers(0, 60, (n, 16, 16)).astype(np.uint8)
    for i, c in enumerate(labels):
        r, q = divmod(int(c), 2)
        images[i, r * 8 + 2 : r * 8 + 6, q * 8 + 2 : q * 8 + 6] = 220
    return images, labels


def npy(array: np.ndarray) -> bytes:
    buf = io.BytesIO()
    np.save(buf, array)
    return buf.getvalue()


@pytest.fixture(scope="module")
def task_setup(tmp_path_factory):
    root = tmp_path_factory.mktemp("newtask")
    files = {}
    for split, (n, seed) in {"train": (600, 0), "test": (200, 1)}.items():
        images, labels = shapes(n, seed)
        files[f"{split}-images.npy"], files[f"{split}-labels.npy"] = npy(images), npy(labels)
    tasks = root / "tasks"
    tasks.mkdir()
    (tasks / "shapes_data.py").write_text(textwrap.dedent(DATA_MODULE))
    (tasks / "tiny-shapes.yaml").write_text(
        yaml.safe_dump(
            {
                "name": "tiny-shapes",
                "title": "Tiny shapes",
                "submission_dir": "TinyShapes",
                "metric": {"column": "top1Accuracy", "label": "top-1 accuracy", "scale": "percent", "threshold": 90.0, "log_columns": ["top1Accuracy"]},
                "inference": {"items": 200, "accuracy_field": "top1Accuracy"},
                "data": {
                    "module": "shapes_data",
                    "files": {name: {"sha256": hashlib.sha256(body).hexdigest(), "bytes": len(body), "raw": True} for name, body in files.items()},
                    "splits": {s: {"images": f"{s}-images.npy", "labels": f"{s}-labels.npy"} for s in ("train", "test")},
                    "classes": ["top-left", "top-right", "bottom-left", "bottom-right"],
                },
            },
            sort_keys=False,
        )
    )
    entries = root / "entries"
    entries.mkdir()
    entry = yaml.safe_load((ROOT / "config/entries/fastnet.yaml").read_text())
    entry |= {"task": "tiny-shapes", "model_args": {"widths": [8, 16, 16, 32]}, "description": "fastnet on tiny shapes"}
    # no flips: a flip moves a square to the other quadrant, another class
    entry["hyperparameters"] |= {"epochs": 4, "batch_size": 50, "precision": "fp32", "tta_flip": False, "augment": {"crop_padding": 1, "flip": False}}
    (entries / "shapes-net.yaml").write_text(yaml.safe_dump(entry, sort_keys=False))
    with serve(files) as (url, _):
        yield {"root": root, "tasks": tasks, "entries": entries, "url": url}


def config_layer(project: Path, setup: dict) -> str:
    layer = {
        "name": "tiny-shapes",
        "task_dirs": [str(setup["tasks"])],
        "entries_dir": str(setup["entries"]),
        "entries": ["shapes-net"],
        "seeds": [0],
        "thresholds": {},
        "inference": {"backends": ["eager"], "warmup": 5},
        "sensitivity_ladders": {},
        "data_sources": {"tiny-shapes": setup["url"]},
    }
    (project / "config/tiny-shapes.yaml").write_text(yaml.safe_dump(layer, sort_keys=False))
    return "config/tiny-shapes.yaml"


def shapes_rows(board: dict) -> list[dict]:
    return [r for t in board["objectives"] if t["task"] == "tiny-shapes" and t["objective"] == "train_time" for r in t["rows"]]


def test_the_commands_see_a_task_from_its_directory(task_setup, tmp_path):
    dirs = ["--task-dir", str(task_setup["tasks"])]
    raw, prepared = tmp_path / "raw", tmp_path / "prepared"
    run_cli(*dirs, "fetch", "tiny-shapes", "--dest", str(raw), "--source", task_setup["url"], check=True)
    run_cli(*dirs, "prepare", "tiny-shapes", "--raw", str(raw), "--out", str(prepared), check=True)
    assert json.loads((prepared / "manifest.json").read_text())["splits"]["train"]["items"] == 600
    unknown = run_cli("prepare", "tiny-shapes", "--raw", str(raw), "--out", str(tmp_path / "other"))
    assert unknown.returncode == 1 and "unknown task 'tiny-shapes'" in unknown.stderr


@pytest.mark.slow
def test_snakemake_and_dvc_run_a_task_added_from_a_directory(task_setup, tmp_path):
    project = copy_project(tmp_path / "project")
    configfile = config_layer(project, task_setup)
    run_snakemake(project, "--cores", "2", "results/leaderboard.json", "--configfile", configfile)
    board = json.loads((project / "results/leaderboard.json").read_text())
    (row,) = shapes_rows(board)
    assert row["source"] == "runs/shapes-net" and row["seed_sources"] == ["runs/shapes-net/seed0"] and row["epochs"] >= 1
    assert (project / "data/prepared/tiny-shapes/manifest.json").is_file()

    # the same config through the DVC pipeline written for it, in a git repository
    repo = copy_project(tmp_path / "repo")
    for part in (".dvcignore", ".dvc/config", ".gitignore"):
        (repo / part).parent.mkdir(parents=True, exist_ok=True)
        shutil.copy2(ROOT / part, repo / part)
    configfile = config_layer(repo, task_setup)
    env = tool_env(
        {"DVC_NO_ANALYTICS": "1", "GIT_AUTHOR_NAME": "t", "GIT_AUTHOR_EMAIL": "t@x.invalid", "GIT_COMMITTER_NAME": "t", "GIT_COMMITTER_EMAIL": "t@x.invalid"}
    )
    run_cli("pipeline", "dvc", "--config", configfile, cwd=repo, check=True, env=env)
    stages = yaml.safe_load((repo / "dvc.yaml").read_text())["stages"]
    assert list(stages["fetch"]["foreach"]) == ["tiny-shapes"] and list(stages["train"]["foreach"]) == ["shapes-net-0"]
    for cmd in (["git", "init", "-q"], ["git", "add", "-A"], ["git", "commit", "-qm", "project"], ["dvc", "repro"]):
        proc = subprocess.run(cmd, cwd=repo, env=env, capture_output=True, text=True, timeout=1800)
        assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    dvc_board = json.loads((repo / "results/leaderboard.json").read_text())
    (dvc_row,) = shapes_rows(dvc_board)
    assert dvc_row["source"] == row["source"] and dvc_row["epochs"] == row["epochs"]  # same seed, same data: the same epochs
