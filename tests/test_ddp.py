"""Data-parallel training (DDP): the launcher and rank helpers, and a real
run with 2 CPU processes (gloo, started by torchrun) on a tiny configuration,
compared with the same recipe in one process, then the report's scaling
section built from both."""

from __future__ import annotations

import json
import re
import subprocess
import sys

import numpy as np
import pytest
from conftest import ROOT, run_cli, tool_env
from hypothesis import given
from hypothesis import strategies as st
from tiny_training import read_log, train_args, write_entry

from dawnpipe.errors import DawnpipeError
from dawnpipe.logs import read_run_tsv
from dawnpipe.schemas.results import RunLog, validate
from dawnpipe.tasks import get_task
from dawnpipe.train import distributed as ddp

# ---------------------------------------------------------------- fast


@given(n=st.integers(0, 5000), world=st.integers(1, 64))
def test_shards_partition_a_batch_in_order(n, world):
    bounds = [ddp.shard(n, ddp.Rank(r, 0, world)) for r in range(world)]
    assert bounds[0][0] == 0 and bounds[-1][1] == n
    assert all(a[1] == b[0] for a, b in zip(bounds, bounds[1:]))  # contiguous, no overlap, no gap
    sizes = [hi - lo for lo, hi in bounds]
    assert max(sizes) - min(sizes) <= 1


def test_rank_comes_from_torchrun_or_srun_environment():
    assert ddp.rank_from_env({}, 2) is None  # nobody launched us: launch
    assert ddp.rank_from_env({"RANK": "1", "WORLD_SIZE": "2", "LOCAL_RANK": "1"}, 2) == ddp.Rank(1, 1, 2, "torchrun")
    srun = {"SLURM_STEP_ID": "0", "SLURM_PROCID": "3", "SLURM_LOCALID": "1", "SLURM_NTASKS": "4"}
    assert ddp.rank_from_env(srun, 4) == ddp.Rank(3, 1, 4, "srun")
    # the batch step of a 4-task job (no step id) or a one-task step is a launcher, not a rank
    assert ddp.rank_from_env({"SLURM_PROCID": "0", "SLURM_NTASKS": "4"}, 4) is None
    assert ddp.rank_from_env({**srun, "SLURM_NTASKS": "1"}, 4) is None
    with pytest.raises(DawnpipeError, match="WORLD_SIZE=4"):
        ddp.rank_from_env({"RANK": "0", "WORLD_SIZE": "4", "LOCAL_RANK": "0"}, 2)


def test_launcher_uses_torchrun_on_one_node_and_refuses_several_without_slurm():
    cmd, env = ddp.launch_command(ddp.Layout(1, 2), ["train", "--seed", "0"], {}, threads=3)
    assert cmd[:4] == [sys.executable, "-m", "torch.distributed.run", "--standalone"]
    assert "--nproc-per-node=2" in cmd and cmd[-5:] == ["-m", "dawnpipe", "train", "--seed", "0"]
    assert env == {"OMP_NUM_THREADS": "3"}
    with pytest.raises(DawnpipeError, match="needs a Slurm allocation"):
        ddp.launch_command(ddp.Layout(2, 4), ["train"], {})


def test_hardware_tag_says_how_many_processes():
    assert ddp.hardware_tag("aws-p3.16xlarge", ddp.Layout(1, 1)) == "aws-p3.16xlarge"
    assert ddp.hardware_tag("local-cpu", ddp.Layout(1, 2)) == "local-cpu (2 processes)"
    assert ddp.hardware_tag("aws-p3.16xlarge", ddp.Layout(16, 8)) == "16 x aws-p3.16xlarge (128 processes)"


def test_cuda_device_of_a_rank():
    assert ddp.cuda_device_index(ddp.Rank(5, 5, 8), 8) == 5  # all the node's GPUs visible
    assert ddp.cuda_device_index(ddp.Rank(5, 5, 8), 1) == 0  # Slurm bound one GPU to the task
    with pytest.raises(DawnpipeError, match="no CUDA device"):
        ddp.cuda_device_index(ddp.Rank(0, 0, 2), 0)


def test_distributed_tensorflow_entry_is_refused(tmp_path):
    entry = write_entry(tmp_path / "tf2.yaml", framework="tensorflow", distributed={"processes_per_node": 2})
    proc = run_cli(*train_args(entry, tmp_path / "none", tmp_path / "out"))
    assert proc.returncode == 1
    assert "tf2.yaml: distributed: data-parallel training is implemented for the PyTorch image trainer only" in proc.stderr


def test_several_nodes_without_slurm_is_a_clear_error(tmp_path):
    entry = write_entry(tmp_path / "multi.yaml", distributed={"nodes": 2, "processes_per_node": 1})
    env = {k: v for k, v in tool_env().items() if not k.startswith("SLURM_")}
    proc = run_cli(*train_args(entry, tmp_path / "none", tmp_path / "out"), env=env)
    assert proc.returncode == 1 and "more than one node needs a Slurm allocation" in proc.stderr


# ---------------------------------------------------------------- slow: real processes


@pytest.fixture(scope="module")
def runs(tmp_path_factory, prepared_fashion_mnist):
    """The tiny recipe trained by one process and by two (torchrun, gloo)."""
    root = tmp_path_factory.mktemp("ddp")
    data = prepared_fashion_mnist
    single = write_entry(root / "entries" / "tiny.yaml")
    double = write_entry(root / "entries" / "tiny-2proc.yaml", distributed={"nodes": 1, "processes_per_node": 2})
    out = {}
    for name, entry in (("single", single), ("ddp", double)):
        out[name] = root / "runs" / name
        out[name + "_proc"] = run_cli(*train_args(entry, data, out[name]), check=True)
    out["data"], out["root"] = data, root
    return out


@pytest.mark.slow
def test_two_gloo_processes_log_like_one_and_reach_close_accuracy(runs):
    task = get_task("fashion-mnist")
    one_tsv, one_log = read_log(runs["single"])
    two_tsv, two_log = read_log(runs["ddp"])
    # the same per-epoch log format, valid by the same schemas
    read_run_tsv(runs["ddp"] / "train.tsv", task)
    validate(RunLog, two_log, str(runs["ddp"] / "train.parquet"))
    assert list(two_tsv.columns) == list(one_tsv.columns) and list(two_log.columns) == list(one_log.columns)
    assert two_tsv["epoch"].tolist() == one_tsv["epoch"].tolist() == [1, 2, 3, 4]
    assert (np.diff(two_tsv["hours"]) > 0).all()
    # same items, same augmentation, global batch 64 = 2 x 32: only batch-norm statistics differ
    assert abs(two_tsv["top1Accuracy"].iloc[-1] - one_tsv["top1Accuracy"].iloc[-1]) <= 3.0
    assert two_log["train_loss"].iloc[-1] == pytest.approx(one_log["train_loss"].iloc[-1], rel=0.05)
    assert (two_log["items_per_second"] * two_log["epoch_train_seconds"]).round().tolist() == [2000.0] * 4

    run = json.loads((runs["ddp"] / "run.json").read_text())
    assert run["world_size"] == 2 and run["nodes"] == 1
    assert run["hardware"] == "local-cpu (2 processes)" and run["hardware_price_tag"] == "local-cpu"
    assert run["result"]["distributed"] == {"nodes": 1, "processes_per_node": 2, "world_size": 2, "backend": "gloo", "launcher": "torchrun"}
    assert "starting 2 processes" in runs["ddp_proc"].stdout
    single = json.loads((runs["single"] / "run.json").read_text())
    assert single["world_size"] == 1 and single["hardware"] == "local-cpu" and single["result"]["distributed"]["backend"] is None


@pytest.mark.slow
def test_report_shows_scaling_against_world_size(runs):
    root = runs["root"]
    prices = ROOT / "config" / "prices.yaml"
    for name in ("single", "ddp"):
        d = runs[name]
        run_cli(
            "extract",
            "--tsv",
            str(d / "train.tsv"),
            "--log-parquet",
            str(d / "train.parquet"),
            "--run-json",
            str(d / "run.json"),
            "--prices",
            str(prices),
            "--out",
            str(d / "time_to_accuracy.json"),
            check=True,
        )
        run_cli(
            "infer",
            "--checkpoint",
            str(d / "model.pt"),
            "--run-json",
            str(d / "run.json"),
            "--data",
            str(runs["data"]),
            "--prices",
            str(prices),
            "--out",
            str(d / "latency.json"),
            "--items-parquet",
            str(d / "latency.parquet"),
            "--threads",
            "1",
            "--warmup",
            "5",
            "--limit",
            "200",
            "--throughput-seconds",  # a short look: the report's scaling is read from training
            "0.05",
            check=True,
        )
    html = root / "leaderboard.html"
    run_cli(
        "report",
        "--runs",
        str(runs["single"]),
        str(runs["ddp"]),
        "--config-name",
        "ddp-test",
        "--json",
        str(root / "lb.json"),
        "--html",
        str(html),
        "--table",
        str(root / "runs.parquet"),
        "--csv",
        str(root / "runs.csv"),
        check=True,
    )
    page = html.read_text()
    section = page[page.index('id="scaling"') :]
    assert "Scaling over processes" in page and "tiny, tiny-2proc" in section
    rows = section[: section.index("</table>")].split("<tr>")[2:]
    assert [r.split("</td>")[0].split(">")[-1] for r in rows] == ["1", "2"]  # one row per world size
    assert "speed-up against processes" in section  # the chart
    tta = json.loads((runs["ddp"] / "time_to_accuracy.json").read_text())
    assert tta["hardware"] == "local-cpu (2 processes)"
    assert tta["usd_per_hour"] == pytest.approx(0.10264)  # one node's price: the priced tag, not the display tag


def test_scaling_entries_share_one_recipe():
    """config/entries/fastnet-2proc.yaml is fastnet.yaml with a layout: if the
    recipes drift apart, the report no longer puts them in one scaling study."""
    from dawnpipe.entries import load_entry, run_settings
    from dawnpipe.report.scaling import recipe_key

    def key(name):
        entry = load_entry(ROOT / "config" / "entries" / f"{name}.yaml")
        settings = run_settings(entry, seed=0, threshold=91.0, official_threshold=93.0, train_limit=None, test_limit=None, stop_at_threshold=True)
        return recipe_key({"settings": settings, "hardware": entry["hardware"]})

    assert key("fastnet") == key("fastnet-2proc") != key("resnet20-dawn")


def test_scaling_study_speedups_against_the_smallest_world_size():
    import pandas as pd

    from dawnpipe.report.scaling import studies

    def run(entry, world, seed, epoch_seconds, tta_hours, model="fastnet"):
        settings = {
            "entry": {"id": entry, "model": model, "hardware": "local-cpu", "distributed": {"processes_per_node": world}},
            "seed": seed,
            "threshold": 91.0,
        }
        return {
            "run": {
                "entry": entry,
                "seed": seed,
                "task": "fashion-mnist",
                "model": "fastnet",
                "hardware": "local-cpu",
                "hardware_price_tag": "local-cpu",
                "world_size": world,
                "threshold": 91.0,
                "demo_threshold": True,
                "settings": settings,
            },
            "log": pd.DataFrame({"epoch_train_seconds": epoch_seconds}),
            "tta": {"reached": tta_hours is not None, "time_to_accuracy_hours": tta_hours, "epochs_to_accuracy": 3, "cost_usd": None},
        }

    runs = [
        run("one", 1, 0, [10.0, 10.0], 0.01),
        run("one", 1, 1, [12.0, 12.0], 0.03),
        run("four", 4, 0, [3.0, 3.0], 0.005),
        run("four", 4, 1, [3.0, 3.0], None),
        run("alone", 1, 0, [1.0], 0.1, model="resnet20"),
    ]  # another recipe, one world size: no study
    [study] = studies(runs)
    one, four = study["points"]
    assert (one["world_size"], four["world_size"]) == (1, 4) and study["entries"] == ["four", "one"]
    assert one["epoch_seconds"] == 11.0 and four["epoch_seconds"] == 3.0
    assert four["epoch_speedup"] == pytest.approx(11 / 3) and four["epoch_efficiency"] == pytest.approx(11 / 12)
    assert four["reached_runs"] == 1 and four["tta_speedup"] == pytest.approx(0.02 / 0.005)
    assert one["epoch_speedup"] == 1.0 and one["tta_efficiency"] == 1.0


def test_ranks_get_the_launchers_command_line():
    """Every option of `dawnpipe train` survives the trip to the ranks."""
    import argparse

    from dawnpipe.train import cli

    argv = [
        "--entry",
        "e.yaml",
        "--seed",
        "3",
        "--data",
        "d",
        "--tsv",
        "t.tsv",
        "--log-parquet",
        "l.parquet",
        "--checkpoint",
        "m.pt",
        "--run-json",
        "r.json",
        "--train-limit",
        "100",
        "--stop-at-threshold",
        "--threads",
        "2",
        "--no-resume",
        "--fashion-mnist",
        "70.5",
        "--telemetry-interval",
        "0",
    ]
    parser = argparse.ArgumentParser()
    cli.configure(parser)
    args = parser.parse_args(argv)
    again = cli.command_line(args)
    assert again[0] == "train" and vars(parser.parse_args(again[1:])) == vars(args)


@pytest.mark.slow
def test_two_process_run_stopped_by_sigterm_resumes_to_the_same_log(runs, tmp_path):
    """SIGTERM to `dawnpipe train` (what Snakemake or Slurm sends) reaches both
    ranks through torchrun; they stop together, and a restart resumes from the
    last finished epoch to the uninterrupted two-process run's log."""
    import signal
    import time

    import pandas as pd
    from tiny_training import start_training

    entry = runs["root"] / "entries" / "tiny-2proc.yaml"
    out = tmp_path / "stopped"
    args = train_args(entry, runs["data"], out)
    proc = start_training(args)
    marker = out / "work" / "epoch.json"
    deadline = time.monotonic() + 600
    while time.monotonic() < deadline and proc.poll() is None:
        if marker.exists() and json.loads(marker.read_text() or "{}").get("epoch", 0) >= 2:
            break
        time.sleep(0.02)
    assert proc.poll() is None, proc.communicate()
    proc.send_signal(signal.SIGTERM)
    _, err = proc.communicate(timeout=300)
    assert proc.returncode == 1 and "Traceback" not in err, err
    (line,) = [x for x in err.splitlines() if "error:" in x]
    assert line.startswith("dawnpipe train: error: rank ") and "stopped by SIGTERM" in line
    assert (out / "work" / "last.pt").exists() and not (out / "run.json").exists()

    done = run_cli(*args, check=True)
    assert "resuming after epoch" in done.stdout
    ref, got = pd.read_csv(runs["ddp"] / "train.tsv", sep="\t"), pd.read_csv(out / "train.tsv", sep="\t")
    assert got["epoch"].tolist() == ref["epoch"].tolist()
    assert got["top1Accuracy"].tolist() == ref["top1Accuracy"].tolist()
    result = json.loads((out / "run.json").read_text())["result"]
    assert result["world_size"] == 2 and result["resumed_from_epoch"] >= 1
    log = pd.read_parquet(out / "train.parquet")
    assert np.allclose(log["hours"] * 3600, np.cumsum(log["epoch_train_seconds"] + log["lost_seconds"]))
    assert result["lost_training_seconds"] == pytest.approx(log["lost_seconds"].sum())


@pytest.mark.slow
def test_a_failing_rank_is_one_line_naming_it_and_the_ranks_output_is_kept(tmp_path, prepared_fashion_mnist):
    """Real bad input (a truncated label array) makes the ranks fail: the job
    says so in one line naming the rank, the entry, the seed and the rank's own
    reason, and torchrun's traceback with every rank's output stays in files.
    Which rank reads the array first is a race: the other fails on it too, or,
    where the first has already left the process group, says that it lost it;
    the line names a rank that failed on the array either way."""
    import shutil

    data = tmp_path / "prepared"
    shutil.copytree(prepared_fashion_mnist, data)
    labels = data / "train_labels.npy"
    labels.write_bytes(labels.read_bytes()[:100])
    entry = write_entry(tmp_path / "entries" / "tiny-2proc.yaml", distributed={"nodes": 1, "processes_per_node": 2})
    out = tmp_path / "out"
    proc = run_cli(*train_args(entry, data, out))
    assert proc.returncode == 1 and "Traceback" not in proc.stdout + proc.stderr, proc.stderr
    (line,) = proc.stderr.splitlines()
    named = re.match(r"dawnpipe train: error: rank ([01]) of tiny-2proc seed 0 failed: ", line)
    assert named and "train_labels.npy: not a readable prepared array" in line, line
    ranks = out / "work" / "ranks"
    assert line.endswith(f"(every rank's output: {ranks})")
    assert "ChildFailedError" in (ranks / "launcher.stderr").read_text()  # torchrun's own traceback, kept
    stderr_files = sorted(ranks.rglob("stderr.log"))
    assert len(stderr_files) == 2 and all("dawnpipe train: error:" in f.read_text() for f in stderr_files)
    assert "not a readable prepared array" in (stderr_files[0].parent.parent / named.group(1) / "stderr.log").read_text()
    assert not any("internal error" in f.read_text() for f in stderr_files)  # a lost peer is no bug of dawnpipe's
    assert not (out / "run.json").exists()


def test_the_rank_named_is_one_that_failed_before_one_that_lost_its_peer(tmp_path):
    """torchrun's layout of a rank's output: rank 0 says it lost the process
    group, rank 1 why it left it; the job's line names rank 1."""
    attempt = tmp_path / "run_x" / "attempt_0"
    for rank, text in ((0, f"dawnpipe train: error: {ddp.PEER_LEFT} (Connection closed by peer)"), (1, "dawnpipe train: error: data.npy: not readable")):
        (attempt / str(rank)).mkdir(parents=True)
        (attempt / str(rank) / "stderr.log").write_text(f"something it printed\n{text}\n")
    assert ddp.failed_rank(tmp_path) == (1, "data.npy: not readable")
    (attempt / "1" / "stderr.log").write_text(f"dawnpipe train: error: {ddp.PEER_LEFT} (Broken pipe)\n")
    assert ddp.failed_rank(tmp_path)[0] == 0  # every rank lost the group: the lowest


LEAVES_THE_GROUP = """
import datetime, os, sys
import torch, torch.distributed as dist
from dawnpipe.errors import DawnpipeError
from dawnpipe.train import distributed as ddp
rank = ddp.Rank(int(sys.argv[1]), int(sys.argv[1]), 2, "torchrun")
dist.init_process_group("gloo", init_method="env://", rank=rank.rank, world_size=2, timeout=datetime.timedelta(seconds=60))
if rank.rank == 1:
    os._exit(3)  # leaves without a word, as a rank killed by its bad input or out of memory does
try:
    with ddp.peers_watched(rank):
        for _ in range(100):
            dist.all_reduce(torch.ones(1))
except DawnpipeError as e:
    print(e, flush=True)
    sys.exit(1)
finally:
    dist.destroy_process_group()  # as dawnpipe's trainer leaves the group
"""


def test_a_rank_whose_peer_leaves_says_so_in_one_line(tmp_path):
    """Two real gloo processes: rank 1 exits after the group forms; rank 0's
    next collectives fail under it, and it says that another rank left,
    which the launcher reads as not its own failure."""
    env = tool_env({"MASTER_ADDR": "127.0.0.1", "MASTER_PORT": str(ddp.free_port())})
    procs = [
        subprocess.Popen([sys.executable, "-c", LEAVES_THE_GROUP, str(r)], env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True) for r in (0, 1)
    ]
    (out0, err0), _ = (p.communicate(timeout=120) for p in procs)
    assert (procs[0].returncode, procs[1].returncode) == (1, 3), err0
    assert out0.startswith(ddp.PEER_LEFT + " (") and out0.count("\n") == 1, out0
