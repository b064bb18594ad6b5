"""DVC for real (no mocks), in temporary git repositories made from the project.

Two kinds of test:
- agreement (dry runs, no training): for the same config, every DVC stage
  writes exactly the files of one Snakemake job and calls the same
  ``python -m dawnpipe`` command with the same meaning, argument by argument;
- the pipeline (slow, trains): ``dvc repro``; a second repro that does
  nothing; ``dvc status`` clean; comments that rerun nothing; metrics and
  plots; the same leaderboard as Snakemake's; push to a local-directory
  remote and a fresh clone whose ``dvc pull`` restores identical bytes without
  training; one changed entry rerunning only its own work.

The pipeline runs a variant of config/test.yaml made inside the temporary
repository (written as its config/config.yaml, then dvc.yaml written from it
with `dawnpipe pipeline dvc`, as a user would): one seed and two cheap
entries, ``fastnet`` and ``fastnet-b`` (a copy of it), so that a change to
one has another to leave alone.
"""

from __future__ import annotations

import argparse
import csv
import hashlib
import importlib
import json
import re
import shlex
import shutil
import subprocess
from pathlib import Path, PurePosixPath
from types import SimpleNamespace

import pytest
import yaml
from conftest import ROOT, copy_project, run_snakemake, tool_env
from submission_factory import train_pair

from dawnpipe.cli import COMMANDS
from dawnpipe.pipeline.config import resolve

# What DVC needs besides the parts copy_project takes.
DVC_PARTS = [".dvcignore", ".dvc/config", ".dvc/.gitignore", ".gitignore"]
TIMEOUT = 3600  # seconds; training on a shared 2-core machine


def dvc_env(base: Path) -> dict[str, str]:
    return tool_env(
        {
            "DVC_NO_ANALYTICS": "1",
            "DVC_SITE_CACHE_DIR": str(base / "dvc-site-cache"),
            "GIT_AUTHOR_NAME": "dawnpipe tests",
            "GIT_AUTHOR_EMAIL": "tests@dawnpipe.invalid",
            "GIT_COMMITTER_NAME": "dawnpipe tests",
            "GIT_COMMITTER_EMAIL": "tests@dawnpipe.invalid",
        }
    )


def run(repo: Path, env: dict, *cmd: str, check: bool = True) -> subprocess.CompletedProcess:
    proc = subprocess.run(list(cmd), cwd=repo, env=env, capture_output=True, text=True, timeout=TIMEOUT)
    if check and proc.returncode != 0:
        raise AssertionError(f"{' '.join(cmd)} failed ({proc.returncode}) in {repo}:\n{proc.stdout[-6000:]}\n{proc.stderr[-6000:]}")
    return proc


def make_repo(dest: Path, env: dict, config: dict, extra_entries: dict[str, str] | None = None) -> Path:
    """A git repository of the project whose config/config.yaml is ``config``,
    with dvc.yaml and params.yaml written for it."""
    copy_project(dest)
    for part in DVC_PARTS:
        (dest / part).parent.mkdir(parents=True, exist_ok=True)
        shutil.copy2(ROOT / part, dest / part)
    (dest / "config/config.yaml").write_text(yaml.safe_dump(config, sort_keys=False), encoding="utf-8")
    for entry_id, text in (extra_entries or {}).items():
        (dest / config["entries_dir"] / f"{entry_id}.yaml").write_text(text, encoding="utf-8")
    run(dest, env, "python", "-m", "dawnpipe", "pipeline", "dvc")
    run(dest, env, "git", "init", "-q", "-b", "main")
    run(dest, env, "git", "add", "-A")
    run(dest, env, "git", "commit", "-q", "-m", "project")
    return dest


def commit(repo: Path, env: dict, message: str) -> None:
    run(repo, env, "git", "add", "-A")
    run(repo, env, "git", "commit", "-q", "--allow-empty", "-m", message)


def stages_run(dvc_output: str) -> list[str]:
    return re.findall(r"^Running stage '([^']+)'", dvc_output, flags=re.M)


def dvc_stages(repo: Path, env: dict) -> dict[str, dict]:
    """Every stage of the repository's dvc.yaml as DVC resolves it: cmd and outs."""
    script = (
        "import json\nfrom dvc.repo import Repo\n"
        "with Repo('.') as repo:\n"
        "    print(json.dumps({s.name: {'cmd': s.cmd, 'outs': [str(o.def_path) for o in s.outs]} for s in repo.index.stages}))\n"
    )
    return json.loads(run(repo, env, "python", "-c", script).stdout)


def status(repo: Path, env: dict) -> dict:
    return json.loads(run(repo, env, "dvc", "status", "--json").stdout or "{}")


def tracked_files(repo: Path) -> dict[str, str]:
    """sha256 of every file dvc.lock says a stage wrote (directories expanded)."""
    lock = yaml.safe_load((repo / "dvc.lock").read_text(encoding="utf-8"))
    digests = {}
    for stage in lock["stages"].values():
        for out in stage.get("outs", []):
            path = repo / out["path"]
            files = sorted(p for p in path.rglob("*") if p.is_file()) if out["md5"].endswith(".dir") else [path]
            for f in files:
                digests[f.relative_to(repo).as_posix()] = hashlib.sha256(f.read_bytes()).hexdigest()
    return digests


# ---------------------------------------------------------------- agreement


def snakemake_jobs(workdir: Path) -> list[dict]:
    """Jobs of a forced dry run: rule, output files (+ log) and shell command."""
    out = run_snakemake(workdir, "--dry-run", "--printshellcmds", "--forceall", "results/leaderboard.html").stdout
    jobs, job = [], None
    for line in out.splitlines():
        if m := re.match(r"^(?:local)?rule (\w+):", line):
            job = {"rule": m.group(1), "files": set(), "shell": None}
            jobs.append(job)
        elif job and (m := re.match(r"^\s+(output|log): (.*)$", line)):
            job["files"] |= set(m.group(2).split(", "))
        elif job and line.startswith("Shell command: "):
            job["shell"] = line.removeprefix("Shell command: ")
    return [j for j in jobs if j["shell"]]


def parse_command(argv: list[str]) -> tuple[str, argparse.Namespace]:
    command = argv[0]
    parser = argparse.ArgumentParser()
    importlib.import_module(COMMANDS[command][0]).configure(parser)
    return command, parser.parse_args(argv[1:])


def stage_command(shell: str) -> tuple[str, argparse.Namespace, str]:
    """(command, args, log) of ``scripts/stage LOG COMMAND ARGS``, the form both front ends run."""
    words = shlex.split(shell)
    assert words[0].endswith("scripts/stage"), shell
    return (*parse_command(words[2:]), words[1])


def below(root: str, files: set[str], name_pattern: str) -> set[str]:
    """What discovery in runfiles finds below ``root`` once every output exists."""
    return {f for f in files if PurePosixPath(f).is_relative_to(root) and PurePosixPath(f).match(name_pattern)}


def meaning(command: str, args: argparse.Namespace, outputs: set[str]) -> dict:
    """What a stage command does, with the two front ends' spellings made
    equal: Snakemake passes the job's threads (DVC leaves them to the
    framework; both take the whole machine) and an entry's seeds' results
    (DVC: the directory holding them, as an entry's seeds may differ in
    number from another's)."""
    a = dict(vars(args))
    if command == "train":
        del a["threads"]
    elif command == "prepare":
        # decoding processes: the prepared bytes are the same (tests/test_imagenet.py)
        del a["workers"]
    elif command == "stability":
        found = set()
        for path in map(str, args.results):
            found |= below(path, outputs, "time_to_accuracy.json") if not path.endswith(".json") else {path}
        a["results"] = found
    return {k: str(v) if isinstance(v, Path) else [str(x) for x in v] if isinstance(v, list) else v for k, v in a.items()}


def benchmark_with_local_sources() -> dict:
    """config/benchmark.yaml with the Debian package's Fashion-MNIST as its source."""
    config = resolve(["config/benchmark.yaml"], root=ROOT).values
    config["data_sources"] = {"fashion-mnist": "/usr/share/datasets/fashion-mnist"}
    return config


def with_programs(tmp_path: Path) -> tuple[dict, dict[str, str]]:
    """config/test.yaml with two program entries beside its zoo entries: one in the project, one fetched at a pinned commit."""
    from program_entries import fetched_entry, program_entry, program_repository

    config = resolve(["config/test.yaml"], root=ROOT).values
    config["entries"] = [*config["entries"], "prog", "prog-fetched"]
    fetched = fetched_entry(*program_repository(tmp_path / "their-repo.git"))
    return config, {"prog": yaml.safe_dump(program_entry()), "prog-fetched": yaml.safe_dump(fetched)}


@pytest.mark.parametrize(
    "config",
    [
        pytest.param(lambda tmp: (resolve(["config/test.yaml"], root=ROOT).values, {}), id="test.yaml"),
        pytest.param(lambda tmp: (benchmark_with_local_sources(), {}), id="benchmark.yaml+data_sources"),
        pytest.param(with_programs, id="test.yaml+programs"),
    ],
)
def test_dvc_and_snakemake_run_the_same_commands_on_the_same_files(tmp_path, config):
    config, extra = config(tmp_path)
    env = dvc_env(tmp_path)
    repo = make_repo(tmp_path / "repo", env, config, extra)
    stages = {name: s for name, s in dvc_stages(repo, env).items() if name != "pipeline"}  # DVC's own check
    jobs = snakemake_jobs(repo)
    assert len(jobs) == len(stages), (sorted(j["rule"] for j in jobs), sorted(stages))
    outputs = {o for s in stages.values() for o in s["outs"]}
    by_files = {frozenset(s["outs"]): name for name, s in stages.items()}
    for job in jobs:
        name = by_files.get(frozenset(job["files"]))
        assert name, f"no DVC stage writes exactly what Snakemake's {job['rule']} writes: {sorted(job['files'])}"
        assert name.split("@")[0] == job["rule"]
        s_command, s_args, s_log = stage_command(job["shell"])
        d_command, d_args, d_log = stage_command(stages[name]["cmd"])
        assert (d_command, d_log) == (s_command, s_log)
        assert meaning(d_command, d_args, outputs) == meaning(s_command, s_args, outputs), name


# ---------------------------------------------------------------- the pipeline

SHARED_SUBMISSIONS = "shared-submissions"
SHARED_NAME = "team_resnet9_1v100_pytorch"


def variant_of_test_config() -> tuple[dict, dict[str, str]]:
    config = resolve(["config/test.yaml"], root=ROOT).values
    config["entries"], config["seeds"] = ["fastnet", "fastnet-b"], [0]
    # a directory of someone else's DAWNBench submissions, audited and ranked
    # with the runs: both front ends must pass it to the report
    config["submission_dirs"] = ["results/submissions", SHARED_SUBMISSIONS]
    fastnet = (ROOT / config["entries_dir"] / "fastnet.yaml").read_text(encoding="utf-8")
    return config, {"fastnet-b": fastnet}


@pytest.fixture(scope="module")
def built(tmp_path_factory, fashion_mnist_source):
    """The variant config after one `dvc repro`, dvc.lock committed."""
    base = tmp_path_factory.mktemp("dvc")
    env = dvc_env(base)
    config, extra = variant_of_test_config()
    repo = make_repo(base / "repo", env, config, extra)
    train_pair(repo / SHARED_SUBMISSIONS, SHARED_NAME)
    commit(repo, env, "a shared submission directory")
    first = run(repo, env, "dvc", "repro")
    commit(repo, env, "dvc repro")
    return SimpleNamespace(base=base, env=env, repo=repo, config=config, first=first.stdout)


@pytest.mark.slow
def test_repro_runs_every_stage_once_and_writes_every_output(built):
    names = run(built.repo, built.env, "dvc", "stage", "list", "--name-only").stdout.split()
    ran = stages_run(built.first)
    # pipeline (the check); fetch, prepare; per run train, extract, infer, utilization, sensitivity;
    # per entry flops, stability; export_submissions; report
    assert sorted(ran) == sorted(names) and len(names) == 1 + 2 + 2 * 5 + 2 * 2 + 1 + 1
    assert ran.index("report") == len(ran) - 1
    files = tracked_files(built.repo)
    for entry in built.config["entries"]:
        for name in ("train.tsv", "train.parquet", "model.pt", "run.json", "time_to_accuracy.json", "latency.json", "latency.parquet"):
            assert f"results/runs/{entry}/seed0/{name}" in files
        assert f"results/logs/train/{entry}/seed0.log" in files
    assert "data/raw/fashion-mnist/fetch.json" in files and "data/prepared/fashion-mnist/manifest.json" in files
    assert {"results/leaderboard.json", "results/leaderboard.html", "results/runs.parquet", "results/runs.csv"} <= set(files)


@pytest.mark.slow
def test_second_repro_does_nothing_and_status_is_clean(built):
    before = tracked_files(built.repo)
    again = run(built.repo, built.env, "dvc", "repro")
    assert stages_run(again.stdout) == [], again.stdout
    assert tracked_files(built.repo) == before
    assert status(built.repo, built.env) == {}
    assert "up to date" in run(built.repo, built.env, "dvc", "status").stdout


@pytest.mark.slow
def test_editing_comments_and_number_formats_reruns_nothing_but_the_check(built):
    """The files a configuration is made of are deps of the stage `pipeline`
    (the check that dvc.yaml is up to date): it runs, passes, writes the same
    log, and nothing else reruns."""
    repo, env = built.repo, built.env
    entry = repo / "config/entries/fastnet-b.yaml"
    text = entry.read_text(encoding="utf-8")
    edited = text.replace("  lr: 0.2 ", "  lr: 0.20 ").replace("# peak rate", "# the peak rate (edited)")
    assert edited.count("0.20 ") == 1 and "(edited)" in edited
    entry.write_text("# a new first line\n" + edited, encoding="utf-8")
    for name in ("config/config.yaml", "config/prices.yaml"):
        with open(repo / name, "a", encoding="utf-8") as f:
            f.write("# a comment at the end\n")
    try:
        assert set(status(repo, env)) == {"pipeline"}
        assert stages_run(run(repo, env, "dvc", "repro").stdout) == ["pipeline"]
        assert (repo / "results/logs/pipeline.log").read_text().startswith("pipeline: dvc.yaml and params.yaml are up to date")
    finally:
        run(repo, env, "git", "checkout", "--", "config")
        run(repo, env, "dvc", "repro")  # the check again, on the committed files
    assert status(repo, env) == {} and run(repo, env, "git", "status", "--porcelain").stdout == ""


@pytest.mark.slow
def test_metrics_and_plots_per_run(built):
    shown = json.loads(run(built.repo, built.env, "dvc", "metrics", "show", "--json").stdout)
    (workspace,) = shown.values()  # keyed "" or "workspace", depending on the DVC version
    metrics = {path: body["data"] for path, body in workspace["data"].items()}
    for entry in built.config["entries"]:
        tta = metrics[f"results/runs/{entry}/seed0/time_to_accuracy.json"]
        latency = metrics[f"results/runs/{entry}/seed0/latency.json"]
        assert tta["time_to_accuracy_hours"] > 0 and tta["cost_usd"] > 0
        assert latency["latency_mean_ms"] > 0 and latency["cost_per_10k_usd"] > 0
        assert metrics[f"results/stability/{entry}.json"]["tta_mean_hours"] == tta["time_to_accuracy_hours"]
    plots = json.loads(run(built.repo, built.env, "dvc", "plots", "show", "--json").stdout)["data"]
    for entry in built.config["entries"]:
        (plot,) = plots[f"results/runs/{entry}/seed0/train.tsv"]
        content = plot["content"]
        assert content["encoding"]["x"]["field"] == "hours"
        assert "top1Accuracy" in json.dumps(content["layer"])
        assert len(content["data"]["values"]) >= 1
    out = built.base / "plots"
    run(built.repo, built.env, "dvc", "plots", "show", "--out", str(out))
    page = (out / "index.html").read_text(encoding="utf-8")
    for entry in built.config["entries"]:
        assert f'id = "results_runs_{entry}_seed0_train_tsv"' in page


def leaderboard_outcome(path: Path) -> dict:
    """What must be equal between two builds of the same config: the tables
    (task, objective, threshold, demo flag, official threshold, in order);
    their rows, as runs with their descriptive fields and the outcomes a seed
    fixes (epochs to the threshold, inference accuracy on the same items);
    the exclusions with their reasons; the config name. Measured values
    (times, costs, latencies, their display and rank) and dates differ."""
    board = json.loads(path.read_text(encoding="utf-8"))
    keep = ("source", "entry", "seed", "model", "hardware", "framework", "unit", "epochs", "accuracy", "items", "backend", "threads")
    return {
        "config": board["config"],
        "tables": [
            (
                (t["task"], t["objective"], t["threshold"], t["demo_threshold"], t["official_threshold"]),
                sorted(json.dumps({k: r.get(k) for k in keep}, sort_keys=True) for r in t["rows"]),
            )
            for t in board["objectives"]
        ],
        "excluded": board["excluded"],
    }


def epochs_and_metric(tsv: Path) -> list[dict]:
    with open(tsv, newline="", encoding="utf-8") as f:
        return [{k: v for k, v in row.items() if k != "hours"} for row in csv.DictReader(f, delimiter="\t")]


@pytest.mark.slow
def test_leaderboard_is_the_one_snakemake_builds_and_dvc_can_adopt_its_results(built):
    clone = built.base / "snakemake"
    run(built.base, built.env, "git", "clone", "-q", str(built.repo), str(clone))
    run_snakemake(clone, "--cores", "all", "results/leaderboard.html", timeout=TIMEOUT)
    outcome = leaderboard_outcome(built.repo / "results/leaderboard.json")
    assert sum(len(rows) for _, rows in outcome["tables"]) + len(outcome["excluded"]) >= 4  # not vacuous
    assert leaderboard_outcome(clone / "results/leaderboard.json") == outcome
    # the audited submission of submission_dirs (sources are relative to their directory), in both
    shared = [r for _, rows in outcome["tables"] for r in rows if f"train/{SHARED_NAME}.json" in r]
    shared += [e for e in outcome["excluded"] if f"train/{SHARED_NAME}.json" in e["source"]]
    assert shared, outcome
    for entry in built.config["entries"]:
        tsv = f"results/runs/{entry}/seed0/train.tsv"
        assert epochs_and_metric(clone / tsv) == epochs_and_metric(built.repo / tsv), f"{tsv}: same seed, different training"
    # Snakemake on a cluster, then DVC on the login node: `dvc commit` records
    # what Snakemake made, and DVC then considers it up to date.
    run(clone, built.env, "dvc", "commit", "--force")
    assert status(clone, built.env) == {}
    assert stages_run(run(clone, built.env, "dvc", "repro").stdout) == []


@pytest.mark.slow
def test_push_then_a_fresh_clone_pulls_identical_bytes_without_training(built):
    repo, env = built.repo, built.env
    remote = built.base / "remote"
    run(repo, env, "dvc", "remote", "add", "--default", "storage", str(remote))
    commit(repo, env, "DVC remote: a local directory")
    run(repo, env, "dvc", "push")
    clone = built.base / "clone"
    run(built.base, env, "git", "clone", "-q", str(repo), str(clone))
    assert not (clone / "results").exists() and not (clone / "data").exists()
    pulled = run(clone, env, "dvc", "pull")
    # pull only copies from the remote (it never runs a stage): what shows that
    # nothing was retrained is below, every byte equal to the original's,
    # run.json and logs with their measured times included
    assert re.search(r"\b\d+ files? (fetched|added)", pulled.stdout), pulled.stdout
    original = tracked_files(repo)
    assert tracked_files(clone) == original and len(original) > 20
    assert status(clone, env) == {}
    assert stages_run(run(clone, env, "dvc", "repro").stdout) == []
    assert tracked_files(clone) == original


@pytest.mark.slow
def test_changing_one_entry_reruns_only_its_work(built):
    """Last in this module: it changes the repository."""
    repo, env = built.repo, built.env
    entry = repo / "config/entries/fastnet-b.yaml"
    text = entry.read_text(encoding="utf-8")
    assert text.count("  lr: 0.2 ") == 1
    entry.write_text(text.replace("  lr: 0.2 ", "  lr: 0.15 "), encoding="utf-8")
    diff = json.loads(run(repo, env, "dvc", "params", "diff", "--json").stdout)
    assert list(diff) == ["config/entries/fastnet-b.yaml"] and list(diff["config/entries/fastnet-b.yaml"]) == ["hyperparameters.lr"]
    assert {k: diff["config/entries/fastnet-b.yaml"]["hyperparameters.lr"][k] for k in ("old", "new")} == {"old": 0.2, "new": 0.15}
    # flops reads the network, batch, precision and layout, not the learning rate: not rerun
    assert set(status(repo, env)) == {"pipeline", "train@fastnet-b-0"}  # the check: the entry file changed
    before = tracked_files(repo)
    ran = stages_run(run(repo, env, "dvc", "repro").stdout)
    assert sorted(ran) == sorted(
        [
            "train@fastnet-b-0",
            "extract@fastnet-b-0",
            "infer@fastnet-b-0",
            "stability@fastnet-b",
            "utilization@fastnet-b-0",
            "sensitivity@fastnet-b-0",
            "export_submissions",
            "report",
            "pipeline",
        ]
    )
    after = tracked_files(repo)
    untouched = {
        p
        for p in before
        if "fastnet-b" not in p and not p.startswith(("results/leaderboard", "results/runs.", "results/logs/report", "results/logs/export_submissions"))
    }
    assert {p: after[p] for p in untouched} == {p: before[p] for p in untouched}
    assert after["results/flops/fastnet-b.json"] == before["results/flops/fastnet-b.json"]
    assert after["results/runs/fastnet-b/seed0/run.json"] != before["results/runs/fastnet-b/seed0/run.json"]
    assert json.loads((repo / "results/runs/fastnet-b/seed0/run.json").read_text())["settings"]["entry"]["hyperparameters"]["lr"] == 0.15
    assert status(repo, env) == {}


@pytest.mark.slow
def test_a_program_entry_fetched_at_its_commit_runs_through_dvc_repro(tmp_path, fashion_mnist_source):
    """A program entry under DVC: its repository fetched at the pinned commit by
    the fetch_program stage, then trained, verified, answered and ranked; a
    second repro runs nothing."""
    from program_entries import fetched_entry, program_repository

    env = dvc_env(tmp_path)
    config = resolve(["config/test.yaml"], root=ROOT).values
    config.update(entries=["prog-fetched"], seeds=[0], inference={**config["inference"], "backends": ["onnxruntime"]})
    entry = fetched_entry(*program_repository(tmp_path / "their-repo.git"))
    repo = make_repo(tmp_path / "repo", env, config, {"prog-fetched": yaml.safe_dump(entry)})
    first = run(repo, env, "dvc", "repro")
    ran = stages_run(first.stdout)
    assert {"fetch_program@prog-fetched", "train@prog-fetched-0", "infer@prog-fetched-0", "report"} <= set(ran), ran
    assert ran.index("fetch_program@prog-fetched") < ran.index("train@prog-fetched-0")
    run_info = json.loads((repo / "results/runs/prog-fetched/seed0/run.json").read_text())
    assert run_info["program"]["source"]["commit"] == entry["program"]["source"]["commit"] and run_info["program"]["verified_epoch"] is not None
    board = json.loads((repo / "results/leaderboard.json").read_text())
    assert any(r.get("entry") == "prog-fetched" for t in board["objectives"] for r in t["rows"])
    commit(repo, env, "dvc repro")
    assert stages_run(run(repo, env, "dvc", "repro").stdout) == []
