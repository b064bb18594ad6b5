"""The real-Slurm runs of tests/test_slurm.py, as fixtures (a pytest plugin of
tests/conftest.py): a single-node cluster on localhost started by
scripts/slurm-local.sh (Debian's slurmctld/slurmd/munge, two fake GPUs),
config/test.yaml run through `snakemake --profile profiles/slurm` with one
training job cancelled in the middle of an epoch, and four smaller runs side
by side in a project of their own.

The runs go on in a thread of their own from the moment the session asks for
them (`slurm_runs`), and each fixture below waits for the part it returns. A
run under Slurm spends most of its time waiting: on the cluster's queue, and
on the plugin's status queries, which come 1, 11, 21, ... s apart while no job
has finished. tests/conftest.py's test_workflow therefore starts them before
it runs config/test.yaml locally, so that the two runs of the same
configuration go on side by side instead of one after the other.
"""

from __future__ import annotations

import json
import os
import re
import signal
import subprocess
import threading
import time
from pathlib import Path

import pytest
import yaml
from conftest import ROOT, copy_project, resolved_config, run_snakemake, tool_env
from tiny_training import TINY_ENTRY

SCRIPT = ROOT / "scripts" / "slurm-local.sh"
STATE_DIR = Path(os.environ.get("DAWNPIPE_SLURM_DIR", "/tmp/dawnpipe-slurm"))
SUBMITTED = re.compile(r"Job (\d+) has been submitted with SLURM jobid (\d+)")

# The profile with the plugin's first status query 1 s after a submission
# instead of its 5: the plugin then waits 10 s longer after every query that
# finds no job finished (11, 21, ... s), and the test config's jobs are short,
# so this alone takes minutes off the suite. Nothing else of the profile changes.
SLURM = ("--profile", "profiles/slurm", "--slurm-init-seconds-before-status-checks", "1")

OPT_OUT = "DAWNPIPE_SKIP_SLURM"  # set to skip the real-Slurm tests on a machine that cannot run the local cluster

# The run cancelled in its epoch 2: one that needs several epochs to reach
# config/test.yaml's 50% (resnet20-dawn: its third epoch; fastnet reaches it in its
# first on 3,000 images).
CANCELLED_RUN = "resnet20-dawn"


def no_cluster(why: str):
    """Without the local cluster the Slurm tests fail (CI must not pass without
    them), unless the opt-out variable says to skip them, and why."""
    if os.environ.get(OPT_OUT):
        pytest.skip(f"{OPT_OUT} is set, and: {why}")
    pytest.fail(f"{why}; set {OPT_OUT}=1 to skip the real-Slurm tests on this machine", pytrace=False)


class NoCluster(Exception):
    """The local cluster cannot run here, and why."""


def job_records(jobcomp: Path) -> dict[str, dict[str, str]]:
    """Slurm's completion log: job id -> its fields (JobState, TimeLimit, ...)."""
    records = {}
    for line in jobcomp.read_text().splitlines():
        fields = dict(f.split("=", 1) for f in line.split() if "=" in f)
        if "JobId" in fields:
            records[fields["JobId"]] = fields
    return records


def _marker(path: Path) -> dict | None:
    try:
        return json.loads(path.read_text())
    except (FileNotFoundError, json.JSONDecodeError):
        return None


def _cancel_mid_epoch(marker: Path, proc: subprocess.Popen, timeout: float) -> str | None:
    """scancel the job of a run while its epoch 2 trains (Slurm then sends
    SIGCONT and SIGTERM, and SIGKILL after KillWait); the cancelled job id, or
    None if that moment never came. The trainer is frozen (SIGSTOP; it runs on
    this very node) from the moment its epoch 2 starts until the cancellation,
    so a fast machine cannot finish the epoch before Slurm's signal arrives."""
    deadline = time.monotonic() + timeout
    while proc.poll() is None and time.monotonic() < deadline:
        doc = _marker(marker)
        if doc and doc["epoch"] == 2 and doc["trained_seconds"] is None and doc.get("slurm_job_id"):
            os.kill(doc["pid"], signal.SIGSTOP)
            if (_marker(marker) or {}).get("trained_seconds") is not None:  # too late: the loop had ended
                os.kill(doc["pid"], signal.SIGCONT)
                return None
            subprocess.run(["scancel", doc["slurm_job_id"]], check=True, timeout=60)  # SIGCONT, SIGTERM, ...
            return doc["slurm_job_id"]
        time.sleep(0.02)
    return None


def _srun_run(work: Path) -> list[str]:
    """A data-parallel entry (2 processes), trained: its run.json (the train job alone)."""
    entry = {**TINY_ENTRY, "description": "tiny, 2 processes", "distributed": {"nodes": 1, "processes_per_node": 2}}
    (work / "config/entries/tiny-2proc.yaml").write_text(yaml.safe_dump(entry, sort_keys=False))
    config = resolved_config(work, "config/test.yaml")
    config.update(name="ddp-slurm", entries=["tiny-2proc"], seeds=[0], train_limit=2000, test_limit=1000)
    (work / "config/ddp.yaml").write_text(yaml.safe_dump(config))
    return ["results/runs/tiny-2proc/seed0/run.json", "--configfile", "config/ddp.yaml"]


def _program_run(work: Path) -> list[str]:
    """tests/programs/fmnist_program.py as an entry, to its latency."""
    from program_entries import program_entry

    (work / "config/entries/prog-slurm.yaml").write_text(yaml.safe_dump(program_entry("honest")))
    config = resolved_config(work, "config/test.yaml")
    backends = ["onnxruntime", "onnxruntime-int8"]  # and a program's model quantised to int8 by dawnpipe
    config.update(name="program-slurm", entries=["prog-slurm"], seeds=[0], inference={**config["inference"], "backends": backends})
    (work / "config/program-slurm.yaml").write_text(yaml.safe_dump(config))
    return ["results/runs/prog-slurm/seed0/latency.json", "--configfile", "config/program-slurm.yaml"]


def _study_run(work: Path) -> list[str]:
    """config/test-study.yaml's test-batch on seed 1 only (--config study_seeds=[1])."""
    return ["results/studies/test-batch.html", "--configfile", "config/test-study.yaml", "--config", "study_seeds=[1]"]


def _gpu_run(work: Path) -> list[str]:
    """An entry with device: cuda and 2 processes, which must fail where CUDA is missing: no retry."""
    entry = {**TINY_ENTRY, "device": "cuda", "distributed": {"nodes": 1, "processes_per_node": 2}}
    (work / "config/entries/tiny-gpu2.yaml").write_text(yaml.safe_dump(entry, sort_keys=False))
    config = resolved_config(work, "config/test.yaml")
    config.update(name="gpu-slurm", entries=["tiny-gpu2"], seeds=[0])
    (work / "config/gpu.yaml").write_text(yaml.safe_dump(config))
    return ["--retries", "0", "results/runs/tiny-gpu2/seed0/run.json", "--configfile", "config/gpu.yaml"]


MORE_RUNS = {"srun": _srun_run, "program": _program_run, "study": _study_run, "gpu": _gpu_run}


class SlurmRuns:
    """The cluster and the Slurm runs, in two threads started by ``start``:
    the cluster, then the main run in one; the four smaller runs, in a
    project of their own (its data prepared locally first), in the other,
    once the cluster is up. ``cluster``, ``main`` and ``more`` wait
    for their part and return it, or raise (in the test reading it) what
    stopped it."""

    def __init__(self, main_work: Path, more_work: Path):
        self.main_work, self.more_work = main_work, more_work
        self.started_cluster = False
        self._procs: list[subprocess.Popen] = []
        self._parts: dict[str, object] = {}
        self._done = {name: threading.Event() for name in ("cluster", "main", "more")}
        self._stopping = False
        self._threads = [
            threading.Thread(target=self._chain, args=(("cluster", self._start_cluster), ("main", self._main_run)), daemon=True),
            threading.Thread(target=self._chain, args=(("more", self._more_runs),), daemon=True),
        ]

    def start(self) -> None:
        for thread in self._threads:
            thread.start()

    def _chain(self, *steps) -> None:
        """The steps (name, function) in order; the error that stops one stands for it and every step after it."""
        try:
            for name, step in steps:
                self._parts[name] = step()
                self._done[name].set()
        except BaseException as e:
            for name, _ in steps:
                if not self._done[name].is_set():
                    self._parts[name] = e
                    self._done[name].set()

    def _wait(self, name: str):
        self._done[name].wait()
        part = self._parts[name]
        if isinstance(part, NoCluster):
            no_cluster(str(part))
        if isinstance(part, BaseException):
            raise AssertionError(f"the Slurm runs stopped before their {name} part: {type(part).__name__}: {part}") from part
        return part

    def cluster(self) -> dict:
        return self._wait("cluster")

    def main(self) -> dict:
        return self._wait("main")

    def more(self) -> dict:
        return self._wait("more")

    def _start_cluster(self) -> dict:
        if os.geteuid() != 0:
            raise NoCluster("the local Slurm cluster needs root (apt-get, daemons running as SlurmUser=root)")
        already = subprocess.run(["bash", str(SCRIPT), "status"], capture_output=True).returncode == 0
        proc = subprocess.run(["bash", str(SCRIPT), "start"], capture_output=True, text=True, timeout=900)
        if proc.returncode == 3:
            raise NoCluster(proc.stderr.strip())
        assert proc.returncode == 0, f"scripts/slurm-local.sh start failed:\n{proc.stdout}\n{proc.stderr}"
        self.started_cluster = not already
        return {"jobcomp": STATE_DIR / "log" / "jobcomp.log"}

    def _snakemake(self, work: Path, args: list[str], out_path: Path) -> subprocess.Popen:
        """snakemake --profile profiles/slurm ARGS in ``work``, its output (and errors) to ``out_path``."""
        if self._stopping:
            raise RuntimeError("the session ended first")
        with open(out_path, "w") as out:  # the child keeps its own copy of the file
            proc = subprocess.Popen(["snakemake", *SLURM, *args], cwd=work, env=tool_env(), stdout=out, stderr=subprocess.STDOUT, text=True)
        self._procs.append(proc)
        return proc

    def _main_run(self) -> dict:
        """config/test.yaml to the leaderboard through profiles/slurm, one training job cancelled mid-epoch."""
        work = copy_project(self.main_work)
        args = [
            "results/leaderboard.html",
            "--configfile",
            "config/test.yaml",
            # as many threads per timed job as the local run (test_workflow) uses, so the results can be equal
            "--cores",
            "all",
            # every training job asks for a GPU (CPU entries: the job holds a fake GPU and trains on the CPU)
            "--set-resources",
            "train:gpu=1",
        ]
        proc = self._snakemake(work, args, work / "snakemake.out")
        # generous: the test config trains four models, slowly on a busy 2-core machine
        cancelled = _cancel_mid_epoch(work / f"results/.work/{CANCELLED_RUN}/seed0/epoch.json", proc, timeout=10800)
        proc.wait(timeout=10800)
        output = (work / "snakemake.out").read_text()
        assert proc.returncode == 0, f"snakemake --profile profiles/slurm failed ({proc.returncode}):\n{output[-6000:]}"
        return {"work": work, "output": output, "cancelled": cancelled, "jobs": job_records(self._parts["cluster"]["jobcomp"])}

    def _more_runs(self) -> dict:
        """Four smaller runs through profiles/slurm in a project of their own, its data prepared
        for config/test.yaml first (by a local Snakemake, while the cluster starts: the main run
        fetches and prepares through Slurm), then started together: separate Snakemake
        processes, each with its own configuration and targets (no job in common, so Snakemake's
        locks let them run side by side), while Slurm queues their jobs, and the main run's, on the
        one node. Each test reads its own: the exit status and output of its Snakemake."""
        work = copy_project(self.more_work)
        run_snakemake(work, "data/prepared/fashion-mnist", "--configfile", "config/test.yaml")
        self._done["cluster"].wait()
        if isinstance(self._parts["cluster"], BaseException):
            raise self._parts["cluster"]
        started = {name: self._snakemake(work, make(work), work / f"snakemake-{name}.out") for name, make in MORE_RUNS.items()}
        runs = {}
        for name, proc in started.items():
            proc.wait(timeout=3600)
            runs[name] = (proc.returncode, (work / f"snakemake-{name}.out").read_text())
        return {"work": work, "runs": runs}

    def stop(self) -> None:
        """At the session's end: whatever still runs is stopped, then the cluster if this session started it."""
        self._stopping = True
        for proc in self._procs:
            if proc.poll() is None:
                proc.terminate()
        for thread in self._threads:
            if thread.is_alive():
                thread.join(timeout=120)
        if self.started_cluster:
            subprocess.run(["bash", str(SCRIPT), "stop"], capture_output=True, timeout=300)


@pytest.fixture(scope="session")
def slurm_runs(tmp_path_factory, fashion_mnist_source):
    """The session's Slurm runs, started (in their own thread) by whoever asks first."""
    runs = SlurmRuns(tmp_path_factory.mktemp("slurm"), tmp_path_factory.mktemp("slurm-more"))
    runs.start()
    yield runs
    runs.stop()


@pytest.fixture(scope="session")
def slurm_cluster(slurm_runs) -> dict:
    """The local test cluster; stopped at the session's end if this session started it."""
    return slurm_runs.cluster()


@pytest.fixture(scope="session")
def slurm_workflow(slurm_runs) -> dict:
    """config/test.yaml to the leaderboard through profiles/slurm, one training job cancelled mid-epoch:
    its project, its Snakemake's output, the cancelled job's id and Slurm's records of the jobs."""
    return slurm_runs.main()


@pytest.fixture(scope="session")
def more_slurm_runs(slurm_runs) -> dict:
    """The four smaller runs (MORE_RUNS): their project, and each run's Snakemake's exit status and output."""
    return slurm_runs.more()
