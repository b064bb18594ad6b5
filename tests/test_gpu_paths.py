"""The CUDA paths fixed by reading the code, without a GPU to run them on,
checked where a CPU can check them: fp32 without TF32 on a CUDA device
(torch's CUDA availability stood in for), the peak rows of the names Hopper
machines report, the device count of a data-parallel run's peak, and the
data-parallel path forced at world size 1 (gloo here; NCCL on a GPU, which
bench/gpu_check.sh runs)."""

from __future__ import annotations

import json
import sys

import pytest
import torch
from conftest import run_cli, tool_env
from tiny_training import TINY_ENTRY, train_args, write_entry

from dawnpipe.telemetry.peaks import device_peak, gpu_peak
from dawnpipe.train import distributed as ddp


# ---------------------------------------------------------------- fp32 is fp32 on CUDA
@pytest.fixture
def tf32_flags():
    """TF32 allowed, as torch's default has it for cuDNN; the flags as they were afterwards (they are process-wide)."""
    before = (torch.backends.cudnn.allow_tf32, torch.backends.cuda.matmul.allow_tf32)
    torch.backends.cudnn.allow_tf32 = torch.backends.cuda.matmul.allow_tf32 = True
    yield
    torch.backends.cudnn.allow_tf32, torch.backends.cuda.matmul.allow_tf32 = before


@pytest.fixture
def stand_in_cuda(monkeypatch, tf32_flags):
    """torch believes one CUDA device 0 is there (the code under test makes no CUDA call), TF32 allowed. Its count,
    name and capability are stood in too: torch's cuDNN version check, on its first call in a process, reads the
    capability of every device it is told of, and fails on none."""
    monkeypatch.setattr(torch.cuda, "is_available", lambda: True)
    monkeypatch.setattr(torch.cuda, "current_device", lambda: 0)
    monkeypatch.setattr(torch.cuda, "device_count", lambda: 1)
    monkeypatch.setattr(torch.cuda, "get_device_name", lambda i=None: "stand-in CUDA device")
    monkeypatch.setattr(torch.cuda, "get_device_capability", lambda i=None: (9, 0))


@pytest.mark.parametrize("where", ["train", "infer"])
def test_fp32_is_not_tf32_on_a_stand_in_cuda_device(stand_in_cuda, where):
    if where == "train":
        from dawnpipe.train.torch_base import pick_device

        device = pick_device("auto")
    else:
        from dawnpipe.infer.torch_model import pick_device

        device = pick_device("auto")
    assert device == torch.device("cuda", 0)
    assert torch.backends.cudnn.allow_tf32 is False and torch.backends.cuda.matmul.allow_tf32 is False


def test_a_cpu_device_leaves_the_tf32_flags_alone(tf32_flags):
    from dawnpipe.train.torch_base import pick_device

    assert pick_device("cpu") == torch.device("cpu") and torch.backends.cudnn.allow_tf32 is True


def test_run_environment_says_whether_tf32_was_allowed_on_a_stand_in_cuda_device(stand_in_cuda):
    from dawnpipe.models.precision import use_ieee_fp32
    from dawnpipe.runinfo import torch_environment

    assert torch_environment("cuda:0")["tf32_allowed"] == {"cudnn": True, "matmul": True}
    use_ieee_fp32()
    assert torch_environment("cuda:0")["tf32_allowed"] == {"cudnn": False, "matmul": False}
    assert torch_environment("cpu")["tf32_allowed"] is None  # a CPU run has no TF32 to speak of


# ---------------------------------------------------------------- peaks of Hopper machines
@pytest.mark.parametrize(
    "reported, row, bf16",
    [
        ("NVIDIA H100 80GB HBM3", "NVIDIA H100 80GB HBM3", 989.5),  # the H100 SXM part, as NVML and torch name it (peaks.yaml)
        ("NVIDIA H200", "NVIDIA H200", 989.5),  # the H200 SXM part, as NVML and torch name it (peaks.yaml)
        ("NVIDIA H200 NVL", "NVIDIA H200 NVL", 835.5),  # the PCIe board: never the SXM part's rates
        ("NVIDIA H100 NVL", "NVIDIA H100 NVL", 835.5),
        ("NVIDIA H100 PCIe", "NVIDIA H100 PCIe", 756.5),
    ],
)
def test_hopper_names_find_their_own_row(reported, row, bf16):
    found = gpu_peak(reported)
    assert found["device"] == row and found["bf16"] == bf16 and "dense" in found["source"]


def test_a_data_parallel_run_is_compared_with_the_peak_of_all_its_gpus():
    """The trainer puts world_size in run.json's environment (it was only at the top of run.json, so 8 GPUs were compared with one's peak)."""
    from types import SimpleNamespace

    from dawnpipe.train.torch_trainer import ImageTrainer

    trainer = object.__new__(ImageTrainer)  # summary() alone: no data, no model
    trainer.rank = ddp.Rank(0, 0, 4, "torchrun")
    trainer.layout = ddp.Layout(nodes=1, processes_per_node=4)
    trainer.n_train, trainer.extra_sets, trainer.device = 100, [], torch.device("cpu")
    trainer.test_x = SimpleNamespace(shape=(10,))
    # as on a 4-GPU node (this CPU's torch sees none)
    environment = {**trainer.summary([])["environment"], "device": "cuda:0", "gpus": ["NVIDIA H100 80GB HBM3"] * 4}
    peak = device_peak(environment, None, "bf16")
    assert environment["world_size"] == 4 and peak["devices"] == 4 and peak["compute_tflops"] == 4 * 989.5


# ---------------------------------------------------------------- DDP at world size 1
def test_forcing_ddp_makes_one_process_a_launched_rank(monkeypatch):
    monkeypatch.delenv(ddp.FORCE_DDP, raising=False)
    assert not ddp.Layout(1, 1).data_parallel and ddp.Layout(1, 2).data_parallel
    monkeypatch.setenv(ddp.FORCE_DDP, "1")
    assert ddp.Layout(1, 1).data_parallel
    torchrun = {"RANK": "0", "WORLD_SIZE": "1", "LOCAL_RANK": "0"}
    assert ddp.rank_from_env(torchrun, 1) == ddp.Rank(0, 0, 1, "torchrun") and ddp.Rank(0, 0, 1, "torchrun").distributed
    srun_step = {"SLURM_STEP_ID": "0", "SLURM_PROCID": "0", "SLURM_NTASKS": "1", ddp.FORCE_DDP: "1"}
    assert ddp.rank_from_env(srun_step, 1) == ddp.Rank(0, 0, 1, "srun")  # a forced rank under srun does not launch again
    batch_step = {k: v for k, v in srun_step.items() if k != "SLURM_STEP_ID"}
    assert ddp.rank_from_env(batch_step, 1) is None  # the batch step of a job launches its one rank with srun
    cmd, _ = ddp.launch_command(ddp.Layout(1, 1), ["train"], {})
    assert cmd[:4] == [sys.executable, "-m", "torch.distributed.run", "--standalone"] and "--nproc-per-node=1" in cmd
    assert not ddp.SINGLE.distributed  # one process, nobody launched it: no process group
    unforced = {k: v for k, v in srun_step.items() if k != ddp.FORCE_DDP}
    assert ddp.rank_from_env(unforced, 1) is None  # not forced: a one-task step is a launcher, as before


@pytest.mark.slow
def test_forced_ddp_trains_one_gloo_rank_started_by_torchrun(tmp_path, prepared_fashion_mnist):
    entry = write_entry(
        tmp_path / "tiny-ddp1.yaml", distributed={"nodes": 1, "processes_per_node": 1}, hyperparameters={**TINY_ENTRY["hyperparameters"], "epochs": 1}
    )
    out = tmp_path / "run"
    done = run_cli(*train_args(entry, prepared_fashion_mnist, out), env=tool_env({ddp.FORCE_DDP: "1"}))
    assert done.returncode == 0, done.stderr[-3000:]
    assert "train: starting 1 processes" in done.stdout  # dawnpipe's own launcher, through torchrun
    run = json.loads((out / "run.json").read_text())
    assert run["result"]["distributed"] == {"nodes": 1, "processes_per_node": 1, "world_size": 1, "backend": "gloo", "launcher": "torchrun"}
    assert run["environment"]["world_size"] == 1 and run["world_size"] == 1
