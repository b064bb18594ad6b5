"""The environment a run happened in, for run.json: enough to tell two runs'
hardware and software apart and to find the code that produced them."""

from __future__ import annotations

import datetime as dt
import os
import platform
import socket
import subprocess
import sys
from pathlib import Path
from typing import Any

from dawnpipe.tensorflow_import import tensorflow


def cpu_model() -> str:
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or platform.machine()


def git_state(cwd: str | Path | None = None) -> dict[str, Any]:
    def git(*args):
        return subprocess.run(["git", *args], cwd=cwd, capture_output=True, text=True, timeout=10)

    try:
        head = git("rev-parse", "HEAD")
        if head.returncode != 0:
            return {"commit": None, "dirty": None}
        dirty = git("status", "--porcelain", "--untracked-files=no")
        return {"commit": head.stdout.strip(), "dirty": bool(dirty.stdout.strip())}
    except (OSError, subprocess.SubprocessError):
        return {"commit": None, "dirty": None}


def slurm_info() -> dict[str, Any] | None:
    if "SLURM_JOB_ID" not in os.environ:
        return None
    keys = ("SLURM_JOB_ID", "SLURM_ARRAY_JOB_ID", "SLURM_JOB_NODELIST", "SLURM_NNODES", "SLURM_NTASKS", "SLURM_RESTART_COUNT", "SLURM_JOB_PARTITION")
    return {k.removeprefix("SLURM_").lower(): os.environ[k] for k in keys if k in os.environ}


def base_environment() -> dict[str, Any]:
    return {
        "python": sys.version.split()[0],
        "platform": platform.platform(),
        "hostname": socket.gethostname(),
        "cpu_model": cpu_model(),
        "cpu_count": os.cpu_count(),
        "git": git_state(Path(__file__).resolve().parent),
        "slurm": slurm_info(),
        "cuda_visible_devices": os.environ.get("CUDA_VISIBLE_DEVICES"),
    }


def torch_environment(device) -> dict[str, Any]:
    import torch

    from dawnpipe.models.precision import tf32_allowed

    env = {
        "framework": "pytorch",
        "framework_version": torch.__version__,
        "device": str(device),
        "threads": torch.get_num_threads(),
        "interop_threads": torch.get_num_interop_threads(),
        "cuda": torch.version.cuda,
        "cudnn": torch.backends.cudnn.version() if torch.backends.cudnn.is_available() else None,
        "gpus": [torch.cuda.get_device_name(i) for i in range(torch.cuda.device_count())] if torch.cuda.is_available() else [],
        # whether "fp32" work on the GPU may have run in TF32 (dawnpipe.models.precision); None on a CPU
        "tf32_allowed": tf32_allowed() if str(device).startswith("cuda") else None,
    }
    return env


def tf_environment(device: str) -> dict[str, Any]:
    """The TensorFlow twin of torch_environment; ``device`` is a TF device name (/CPU:0, /GPU:0)."""
    tf = tensorflow()
    import keras

    from dawnpipe.tf_runtime import device_label

    build = tf.sysconfig.get_build_info()
    intra = tf.config.threading.get_intra_op_parallelism_threads()
    inter = tf.config.threading.get_inter_op_parallelism_threads()
    return {
        "framework": "tensorflow",
        "framework_version": tf.__version__,
        "keras_version": keras.__version__,
        "device": device_label(device),
        "tf_device": device,
        # 0 means "TensorFlow's choice", which is one thread per logical CPU
        "threads": intra or os.cpu_count(),
        "interop_threads": inter or os.cpu_count(),
        "threads_set": bool(intra),
        "cuda": build.get("cuda_version"),
        "cudnn": build.get("cudnn_version"),
        "gpus": [d.name for d in tf.config.list_logical_devices("GPU")],
        "mixed_precision_policy": keras.mixed_precision.global_policy().name,
    }


def now_iso() -> str:
    return dt.datetime.now(dt.UTC).isoformat(timespec="seconds")
