"""The workflow on a real Slurm cluster: a single-node cluster on localhost
started by scripts/slurm-local.sh (Debian's slurmctld/slurmd/munge, two fake
GPUs), config/test.yaml run through `snakemake --profile profiles/slurm`.

One run of the whole test configuration answers most questions at once:
- every job ran as a Slurm job (submitted, in Slurm's job completion log,
  SLURM_JOB_ID in each run.json);
- the leaderboard equals the local run's (tests/conftest.py test_workflow)
  except for timing;
- train jobs asked for a GPU land on the fake GPU gres (CUDA_VISIBLE_DEVICES
  set in the job; a stand-in: the devices are /dev/null-like files, so
  training itself runs on the CPU);
- a training job cancelled in the middle of an epoch (SIGTERM, then SIGKILL
  KillWait seconds later, exactly what Slurm does at a walltime) is retried
  by Snakemake with a longer walltime and resumes from its checkpoint.
Four smaller runs, side by side in a project of their own while the main run
goes on: one entry trained by 2 processes started by srun, a program entry, a
study, and a CUDA entry that must fail where CUDA is missing. The runs themselves, and the cluster, are
the fixtures of tests/slurm_runs.py.
"""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
from pathlib import Path

import numpy as np
import pandas as pd
import pytest
import yaml
from conftest import ROOT, job_resources
from slurm_runs import CANCELLED_RUN, SCRIPT, SUBMITTED, job_records

from dawnpipe.schemas.results import RunLog, validate

pytestmark = pytest.mark.slow

# leaderboard fields that are measurements of time (or the date), or follow from them
# (an entry's seeds' values, its spread and whether the rule ties it with the row above follow from its times)
TIMING = {"value", "display", "rank", "wall_hours", "timestamp", "seed_values", "spread", "spread_display", "tied_with_above"}  # and every *_ms latency figure


PROFILE = yaml.safe_load((ROOT / "profiles/slurm/config.yaml").read_text(encoding="utf-8"))
PROFILE_PARTITION = PROFILE["default-resources"]["slurm_partition"]


def _timed(key: str) -> bool:
    return key in TIMING or key.endswith("_ms")


def run_json(work: Path, entry: str, seed: int) -> dict:
    return json.loads((work / f"results/runs/{entry}/seed{seed}/run.json").read_text())


RUNS = [("fastnet", 0), ("fastnet", 1), ("resnet20-dawn", 0), ("resnet20-dawn", 1)]


def _succeeded(run: tuple[int, str], what: str) -> str:
    code, out = run
    assert code == 0, f"snakemake --profile profiles/slurm ({what}) failed ({code}):\n{out[-6000:]}"
    return out


def test_every_job_ran_under_slurm(slurm_workflow):
    out, jobs = slurm_workflow["output"], slurm_workflow["jobs"]
    submitted = SUBMITTED.findall(out)
    table = dict(re.findall(r"^([a-z_]+)\s+(\d+)$", out[: out.index("total")], re.M))  # Snakemake's job table
    total = int(re.search(r"^total\s+(\d+)", out, re.M).group(1))
    assert table["train"] == "4" and table["fetch"] == "1" and table["report"] == "1"
    assert len({smk for smk, _ in submitted}) == total == sum(map(int, table.values()))
    assert "localrule" not in out  # nothing ran outside Slurm
    slurm_ids = [sid for _, sid in submitted]
    assert len(slurm_ids) == total + 1  # + the retried training job
    for sid in slurm_ids:
        expected = "CANCELLED" if sid == slurm_workflow["cancelled"] else "COMPLETED"
        assert jobs[sid]["JobState"] == expected, jobs[sid]
    for entry, seed in RUNS:
        slurm = run_json(slurm_workflow["work"], entry, seed)["environment"]["slurm"]
        assert slurm["job_id"] in slurm_ids and jobs[slurm["job_id"]]["JobState"] == "COMPLETED"
        assert jobs[slurm["job_id"]]["Partition"] == PROFILE_PARTITION  # from the profile, not the rules
    # not vacuous: the profile's partition is not the one Slurm picks without being asked
    default = subprocess.run(["scontrol", "show", "partition", "--oneliner"], capture_output=True, text=True, check=True).stdout
    defaults = [re.search(r"PartitionName=(\S+)", line).group(1) for line in default.splitlines() if "Default=YES" in line]
    assert defaults and PROFILE_PARTITION not in defaults, default
    assert {jobs[sid]["Partition"] for sid in slurm_ids} == {PROFILE_PARTITION}
    # profiles/default, read beside profiles/slurm, allows one timed job at a time on one machine:
    # jobs sent to the cluster take none of it, so they are not queued behind each other
    timed = job_resources(out, "train") + job_resources(out, "infer")
    assert len(timed) == 8 + 1 and all(", timing=0," in r for r in timed), timed  # + the retried training


def _without_timing(board: dict) -> list:
    tables = []
    for t in board["objectives"]:
        # a run has one row per inference backend, ranked by latency: order them by name instead
        rows = sorted(({k: v for k, v in r.items() if not _timed(k)} for r in t["rows"]), key=lambda r: (r["source"], r.get("backend") or ""))
        tables.append({**{k: v for k, v in t.items() if k != "rows"}, "rows": rows})
    return tables


def test_leaderboard_equals_the_local_run_up_to_timing(slurm_workflow, test_workflow):
    slurm_work = slurm_workflow["work"]
    ours = json.loads((slurm_work / "results/leaderboard.json").read_text())
    local = json.loads((test_workflow / "results/leaderboard.json").read_text())
    assert _without_timing(ours) == _without_timing(local)
    assert sorted(ours["excluded"], key=str) == sorted(local["excluded"], key=str)
    assert sum(len(t["rows"]) for t in ours["objectives"]) > 0
    for entry, seed in RUNS:  # the logs themselves: same epochs, accuracies and losses
        rel = f"results/runs/{entry}/seed{seed}"
        a, b = pd.read_csv(slurm_work / rel / "train.tsv", sep="\t"), pd.read_csv(test_workflow / rel / "train.tsv", sep="\t")
        assert a["epoch"].tolist() == b["epoch"].tolist() and a["top1Accuracy"].tolist() == b["top1Accuracy"].tolist()
        pa, pb = pd.read_parquet(slurm_work / rel / "train.parquet"), pd.read_parquet(test_workflow / rel / "train.parquet")
        assert np.allclose(pa["train_loss"], pb["train_loss"], rtol=0, atol=1e-12)


def test_gpu_request_lands_on_fake_gres_stand_in(slurm_workflow):
    """Stand-in for a GPU: Slurm hands each training job one of the two fake
    GPUs and sets CUDA_VISIBLE_DEVICES; run.json records what the job saw."""
    for entry, seed in RUNS:
        env = run_json(slurm_workflow["work"], entry, seed)["environment"]
        assert env["cuda_visible_devices"] in ("0", "1")
        assert env["device"] == "cpu"  # no CUDA behind the fake devices: device auto falls back


def test_cancelled_training_job_resumes_from_its_checkpoint_on_retry(slurm_workflow):
    cancelled, jobs, work = slurm_workflow["cancelled"], slurm_workflow["jobs"], slurm_workflow["work"]
    assert cancelled is not None, f"{CANCELLED_RUN} seed 0 never reached its second epoch under Slurm"
    assert jobs[cancelled]["JobState"] == "CANCELLED" and jobs[cancelled]["TimeLimit"] == "120"
    run = run_json(work, CANCELLED_RUN, 0)
    retry = run["environment"]["slurm"]["job_id"]
    assert retry != cancelled and jobs[retry]["TimeLimit"] == "240"  # runtime grows with the attempt
    result = run["result"]
    assert result["resumed_from_epoch"] == 1  # not from scratch: the checkpoint of epoch 1
    [record] = result["interruptions"]
    assert record["epoch"] == 2 and record["how"] == "signal SIGTERM" and record["slurm_job_id"] == cancelled
    assert record["lost_seconds"] > 0 and result["lost_training_seconds"] == record["lost_seconds"]
    log = pd.read_parquet(work / f"results/runs/{CANCELLED_RUN}/seed0/train.parquet")
    assert log["lost_seconds"].tolist()[:2] == [0.0, record["lost_seconds"]]
    assert np.allclose(log["hours"] * 3600, np.cumsum(log["epoch_train_seconds"] + log["lost_seconds"]))


def test_two_processes_started_by_srun(slurm_cluster, more_slurm_runs):
    """A data-parallel entry (2 processes) under Slurm: the plugin allocates 2
    tasks, `dawnpipe train` starts the ranks with srun, gloo connects them."""
    work = more_slurm_runs["work"]
    _succeeded(more_slurm_runs["runs"]["srun"], "2 processes")
    run = run_json(work, "tiny-2proc", 0)
    assert run["result"]["distributed"] == {"nodes": 1, "processes_per_node": 2, "world_size": 2, "backend": "gloo", "launcher": "srun"}
    assert run["hardware"] == "local-cpu (2 processes)"
    assert run["environment"]["slurm"]["ntasks"] == "2"  # rank 0 is one of srun's 2 tasks
    assert job_records(slurm_cluster["jobcomp"])[run["environment"]["slurm"]["job_id"]]["ProcCnt"] == "2"
    log = pd.read_parquet(work / "results/runs/tiny-2proc/seed0/train.parquet")
    validate(RunLog, log, "train.parquet of the srun run")
    assert log["epoch"].tolist() == list(range(1, len(log) + 1))
    assert (log["items_per_second"] * log["epoch_train_seconds"]).round().eq(2000).all()  # every item, once per epoch


def test_a_program_entry_runs_as_a_slurm_job(slurm_cluster, more_slurm_runs):
    """Somebody's own program (tests/programs/fmnist_program.py) as an entry under
    the Slurm profile: its train job is a Slurm job, the program runs inside it
    (its process group, its telemetry), and dawnpipe verifies and ranks it there."""
    work = more_slurm_runs["work"]
    _succeeded(more_slurm_runs["runs"]["program"], "a program entry")
    run = run_json(work, "prog-slurm", 0)
    job = run["environment"]["slurm"]["job_id"]
    assert job_records(slurm_cluster["jobcomp"])[job]["JobState"] == "COMPLETED"
    assert run["framework"] == "program" and run["program"]["verified_epoch"] is not None and run["program"]["excluded"] is None
    assert json.loads((work / "results/runs/prog-slurm/seed0/latency.json").read_text())["meets_threshold"]
    assert json.loads((work / "results/runs/prog-slurm/seed0/latency/onnxruntime-int8.json").read_text())["precision"] == "int8"
    samples = pd.read_parquet(work / "results/runs/prog-slurm/seed0/telemetry.parquet")
    assert samples["name"].str.contains("descendants").any()  # the program's processes are sampled with the harness


def test_a_study_runs_under_slurm_on_the_configs_study_seeds(slurm_cluster, more_slurm_runs):
    """A study's variants are entries like any other: config/test-study.yaml's
    test-batch through profiles/slurm, every job a Slurm job (none local), every
    variant's run a Slurm job's, and the study's medians those of the runs'
    own logs. With --config study_seeds=[1] (a machine too small for the study
    file's seeds 0 and 1): only seed 1 runs, and the JSON and page say so."""
    work = more_slurm_runs["work"]
    target = "results/studies/test-batch.html"
    out = _succeeded(more_slurm_runs["runs"]["study"], "a study")
    assert "localrule" not in out  # the study stage too ran as a Slurm job
    jobs = job_records(slurm_cluster["jobcomp"])
    submitted = [sid for _, sid in SUBMITTED.findall(out)]
    assert submitted and all(jobs[sid]["JobState"] == "COMPLETED" for sid in submitted)
    doc = json.loads((work / "results/studies/test-batch.json").read_text())
    assert doc["seeds"] == [1] and doc["study_file_seeds"] == [0, 1]
    assert "seeds 1 (the configuration's study_seeds, in place of the study file's 0, 1)" in (work / target).read_text()
    ran = {v["same_as"] or v["id"] for v in doc["variants"]}
    assert ran == {"smoke-fastnet", "smoke-fastnet+batch=32", "smoke-fastnet+batch=128"}
    assert not [p for e in ran for p in (work / "results/runs" / e).glob("seed*") if p.name != "seed1"]  # seed 0 never ran
    for v in doc["variants"]:
        [record] = v["runs"]
        run = run_json(work, v["same_as"] or v["id"], 1)
        assert record["seed"] == 1 and run["environment"]["slurm"]["job_id"] in submitted
        # the study reads each run's own log: the training clock at its first epoch at 70%
        log = pd.read_parquet(work / f"results/runs/{v['same_as'] or v['id']}/seed1/train.parquet")
        assert v["median_time_to_accuracy_hours"]["70.0"] == pytest.approx(float(log.loc[log["top1Accuracy"] >= 70.0, "hours"].iloc[0]), abs=1e-9)


def test_gpu_data_parallel_job_gets_gpus_and_tasks_stand_in(slurm_cluster, more_slurm_runs):
    """Stand-in for a multi-GPU job (no CUDA here): an entry with device: cuda
    and 2 processes asks for 2 GPUs with one task per GPU. Slurm accepts the
    request, gives the job 2 tasks and the fake GPUs, srun starts both ranks,
    and they stop where CUDA itself is missing, saying which GPUs they were given."""
    work = more_slurm_runs["work"]
    code, out = more_slurm_runs["runs"]["gpu"]
    assert code != 0, "a CUDA entry trained without CUDA"
    [(_, sid)] = SUBMITTED.findall(out)
    assert "gpu=2" in out and "tasks=2" in out and "mpi=srun" in out  # what the rule asked for
    record = job_records(slurm_cluster["jobcomp"])[sid]
    assert record["JobState"] == "FAILED" and record["ProcCnt"] == "2"
    log = (work / f".snakemake/slurm_logs/rule_train/tiny-gpu2_0/{sid}.log").read_text()
    assert "starting 2 processes (1 node(s) x 2): srun --ntasks=2" in log
    given = re.findall(r"no CUDA device is available \(CUDA_VISIBLE_DEVICES=([^)]*)\)", log)
    assert given and all(re.fullmatch(r"[01](,[01])?", g) for g in given), log[-3000:]


def test_script_refuses_a_configuration_it_did_not_write(tmp_path, slurm_cluster):
    """Never touch a real cluster's slurm.conf: exercised on a copy of the
    script pointed at a scratch /etc (the variable is the script's own)."""
    script = tmp_path / "slurm-local.sh"
    text = SCRIPT.read_text().replace("CONF_DIR=/etc/slurm", f"CONF_DIR={tmp_path / 'etc'}")
    script.write_text(text)
    (tmp_path / "etc").mkdir()
    (tmp_path / "etc" / "slurm.conf").write_text("ClusterName=production\n")
    assert shutil.which("slurmd"), "the slurm_cluster fixture installs the Slurm packages"
    proc = subprocess.run(
        ["bash", str(script), "start"], capture_output=True, text=True, timeout=120, env={**os.environ, "DAWNPIPE_SLURM_DIR": str(tmp_path / "state")}
    )
    assert proc.returncode == 3 and "was not written by this script" in proc.stderr
    assert (tmp_path / "etc" / "slurm.conf").read_text() == "ClusterName=production\n"


# ---------------------------------------------------------------- static: no cluster needed


def test_stop_removes_the_configuration_it_wrote_and_no_other(tmp_path):
    """With a slurm.conf and no controller, `scontrol show config` (run by the
    Slurm plugin at every Snakemake start) waits 9 s: `stop` leaves no
    configuration of its own behind, and never removes another."""
    script = tmp_path / "slurm-local.sh"
    script.write_text(SCRIPT.read_text().replace("CONF_DIR=/etc/slurm", f"CONF_DIR={tmp_path / 'etc'}"))
    etc = tmp_path / "etc"
    etc.mkdir()
    marker = next(line for line in SCRIPT.read_text().splitlines() if line.startswith("MARKER=")).split('"')[1]
    env = {**os.environ, "DAWNPIPE_SLURM_DIR": str(tmp_path / "state")}
    for own in (True, False):
        for name in ("slurm.conf", "gres.conf"):
            (etc / name).write_text(f"{marker} (a test)\nClusterName=x\n" if own else "ClusterName=production\n")
        proc = subprocess.run(["bash", str(script), "stop"], capture_output=True, text=True, timeout=60, env=env)
        assert proc.returncode == 0, proc.stderr
        assert sorted(p.name for p in etc.iterdir()) == ([] if own else ["gres.conf", "slurm.conf"]), own


def test_no_rule_hard_codes_a_partition_or_an_account():
    """Where jobs run is a fact of the cluster: profiles only, never a rule."""
    rules = sorted((ROOT / "workflow/rules").glob("*.smk")) + [ROOT / "Snakefile", ROOT / "src/dawnpipe/pipeline/stages.py"]
    assert len(rules) >= 4
    for path in rules:
        for number, line in enumerate(path.read_text(encoding="utf-8").splitlines(), 1):
            code = line.split("#", 1)[0]
            assert not re.search(r"slurm_(partition|account)|\b(partition|account)\s*=", code), f"{path.name}:{number}: {line}"


def test_every_key_of_the_slurm_profile_is_explained():
    """Every key the profile sets (at any depth) has a comment on its line or
    on the line above it (a comment block may end with blank-free lines)."""
    lines = (ROOT / "profiles/slurm/config.yaml").read_text(encoding="utf-8").splitlines()
    keys = 0
    for i, line in enumerate(lines):
        m = re.match(r"^(\s*)(?:- )?([A-Za-z0-9_-]+)\s*:", line)
        if not m or line.lstrip().startswith("#"):
            continue
        keys += 1
        above = lines[i - 1].strip() if i else ""
        assert "#" in line or above.startswith("#"), f"profiles/slurm/config.yaml:{i + 1}: {line.strip()} has no comment"
    assert keys == len(PROFILE) + len(PROFILE["default-resources"])


def test_the_default_profile_read_beside_it_keeps_the_slurm_profiles_latency_wait():
    """Snakemake reads profiles/default beside --profile profiles/slurm, key by
    key over it (as its command line does: the workflow's profile last); the
    shared file system's wait must stay the Slurm profile's."""
    from snakemake.cli import get_argument_parser

    args = get_argument_parser(profiles=[ROOT / "profiles/slurm", ROOT / "profiles/default"]).parse_args([])
    assert args.latency_wait == PROFILE["latency-wait"] == 30
