"""bench/gpu_check.sh (issue 29) on this CPU: the bundle it carries to the
device machine (made for real, with pip, and measured against the device
tool's 64 MiB), which wheels it installs there, the summary it reads off the
stages' files for a GPU run (NVML stood in for), and the whole check end to
end as its CPU dry run, whose GPU-only figures must be null with a reason."""

from __future__ import annotations

import json
import subprocess
import sys
import tarfile
from pathlib import Path
from types import SimpleNamespace

import numpy as np
import pandas as pd
import pytest
from conftest import ROOT, tool_env
from nvml_stand_in import FakeGpu, NvmlStandIn

sys.path.insert(0, str(ROOT / "bench"))
import gpu_bundle
import gpu_summary

SCRIPT = ROOT / "bench" / "gpu_check.sh"


def sh(*args: str, timeout: float = 900) -> subprocess.CompletedProcess:
    return subprocess.run(
        ["bash", str(SCRIPT), *args], cwd=ROOT, env=tool_env({"GPU_CHECK_PYTHON": sys.executable}), capture_output=True, text=True, timeout=timeout
    )


@pytest.fixture(scope="module")
def bundle(tmp_path_factory, fashion_mnist_source) -> Path:
    """The bundle as `bench/gpu_check.sh prepare` makes it (pip downloads the wheels for the device's Python)."""
    path = tmp_path_factory.mktemp("gpu-bundle")
    done = sh("prepare", "--bundle", str(path), "--data-from", fashion_mnist_source)
    assert done.returncode == 0, done.stdout + done.stderr
    return path


# ---------------------------------------------------------------- the bundle
def test_bundle_holds_the_pinned_wheels_for_the_device_and_the_data_and_fits(bundle):
    pinned = gpu_bundle.pins()
    wheels = sorted((bundle / "wheels").glob("*.whl"))
    got = dict(gpu_bundle.wheel_name_version(w) for w in wheels)
    assert got == {gpu_bundle.normalize(w): pinned[gpu_bundle.normalize(w)] for w in gpu_bundle.WHEELS}
    compiled = [w.name for w in wheels if "-none-any" not in w.name]
    assert compiled and all("-cp312-" in n and "x86_64" in n for n in compiled)  # rpds-py, pydantic-core: for the device's Python 3.12
    assert sorted(p.name for p in (bundle / "fashion-mnist").iterdir()) == sorted(gpu_bundle.DATA_FILES)
    size = gpu_bundle.travel_size(bundle)
    assert size["total_bytes"] == size["tree_bytes"] + size["bundle_bytes"] <= gpu_bundle.DEVICE_LIMIT_BYTES
    assert size["bundle_bytes"] > 30 * 2**20  # Fashion-MNIST's 31 MB of gzip files are in it, not links to them
    assert json.loads((bundle / "commit.json").read_text())["wheels"] == [w.name for w in wheels]


def test_a_bundle_over_the_device_limit_is_refused(bundle, tmp_path):
    big = tmp_path / "bundle"
    for part in ("wheels", "fashion-mnist"):
        (big / part).mkdir(parents=True)
        for f in (bundle / part).iterdir():
            (big / part / f.name).symlink_to(f)  # links here: what counts is the copy prepare makes of the data
    with open(big / "padding.bin", "wb") as f:  # sparse: 64 MiB that takes no disk
        f.truncate(gpu_bundle.DEVICE_LIMIT_BYTES)
    done = sh("prepare", "--bundle", str(big), "--data-from", str(bundle / "fashion-mnist"))
    assert done.returncode != 0 and "over the device tool's 64 MiB" in done.stderr and "Traceback" not in done.stderr


def test_only_missing_or_older_packages_are_installed(tmp_path):
    have = gpu_bundle.installed_version("jsonschema")
    for name in (f"jsonschema-{have}-py3-none-any.whl", "typing_extensions-999.0-py3-none-any.whl", "no_such_package_here-1.0-py3-none-any.whl"):
        (tmp_path / name).write_bytes(b"")
    plan = {p["package"]: p for p in gpu_bundle.install_plan(tmp_path)}
    assert plan["jsonschema"]["install"] is False and plan["jsonschema"]["installed"] == have
    assert plan["typing-extensions"]["install"] is True  # the interpreter's is older than the carried one
    assert plan["no-such-package-here"] == {**plan["no-such-package-here"], "installed": None, "install": True}


# ---------------------------------------------------------------- the summary of a GPU run (NVML stood in for)
def test_summary_of_a_gpu_run_from_stand_in_nvml_samples(tmp_path):
    from dawnpipe.telemetry.nvml import NvmlGpus
    from dawnpipe.telemetry.utilization import utilization

    gpus = NvmlGpus(nvml=NvmlStandIn([FakeGpu("NVIDIA H100 80GB HBM3", "GPU-0", power_mw=300_000, energy_mj_per_call=30_000)]), visible="0")
    rows = [{"t_s": t, **r} for t in np.arange(0.0, 60.0, 0.1) for r in gpus.sample()]  # 300 W, its counter 300 J/s (one read per 0.1 s)
    samples = pd.DataFrame(rows)
    log = pd.DataFrame(
        {
            "epoch": [1.0, 2.0],
            "hours": [10 / 3600, 20 / 3600],
            "wall_hours": [12 / 3600, 24 / 3600],
            "eval_seconds": [2.0, 2.0],
            "epoch_train_seconds": [10.0, 10.0],
            "top1Accuracy": [90.0, 93.5],
            "items_per_second": [6000.0, 6000.0],
        }
    )
    run = {
        "entry": "fastnet",
        "seed": 0,
        "task": "fashion-mnist",
        "framework": "pytorch",
        "threshold": 93.0,
        "demo_threshold": False,
        "settings": {"entry": {"hyperparameters": {"precision": "bf16"}}},
        "environment": {"device": "cuda:0", "cpu_model": "host CPU", "gpus": ["NVIDIA H100 80GB HBM3"], "world_size": 1},
        "telemetry": {"training_clock_origin_s": 5.0, "interval_s": 0.1, "devices": [{"device": "gpu0", "kind": "gpu", "name": "NVIDIA H100 80GB HBM3"}]},
    }
    flops = {"counted": True, "flops_per_item": 1e8, "arithmetic_intensity": 30.0}
    run_dir = tmp_path / "runs" / "fastnet" / "seed0"
    run_dir.mkdir(parents=True)
    (run_dir / "utilization.json").write_text(json.dumps(utilization(log, run, flops, samples)))
    check = SimpleNamespace(run_dir=lambda r: tmp_path / "runs" / r / "seed0", steps=[], logs=tmp_path / "logs", work=tmp_path)

    tele = gpu_summary.telemetry(check, "fastnet", {"device": "cuda:0"})
    assert tele["power_w_mean"] == 300.0 and tele["memory_used_mb_max"] == 3072.0 and tele["gpu_device"] == "gpu0"
    assert tele["energy_source"] == "NVML" and tele["energy_to_accuracy_j"] == pytest.approx(300.0 * 20, rel=1e-6)  # two 10 s epochs
    assert not {"power_w_mean", "memory_used_mb_max", "energy_to_accuracy_j"} & set(tele["reasons"])
    util = gpu_summary.utilization(check, "fastnet")
    assert util["peak_device"] == "NVIDIA H100 80GB HBM3" and util["peak_tflops"] == 989.5 and util["peak_method"] == "datasheet"
    assert util["fraction_of_peak_median"] == pytest.approx(1e8 * 6000 / 1e12 / 989.5)


# ---------------------------------------------------------------- the whole check, on this CPU
def nulls(section: dict) -> list[str]:
    return [k for k, v in section.items() if v is None]


@pytest.mark.slow
def test_cpu_dry_run_runs_every_step_and_invents_no_gpu_number(bundle, tmp_path):
    out, work = tmp_path / "out", tmp_path / "work"
    done = sh("--cpu-dry-run", "--out", str(out), "--bundle", str(bundle), "--work", str(work), timeout=1200)
    assert done.returncode == 0, done.stdout[-4000:] + done.stderr[-2000:]
    assert "[gpu-check" in done.stdout and "gpu check (cpu-dry-run)" in done.stdout  # progress lines, then the summary
    files = sorted(p.name for p in out.iterdir())
    assert files == ["gpu_check.json", "gpu_check.txt", "gpu_check_logs.tar.gz"]  # the device tool brings back at most 8, each under 16 MiB
    assert all((out / f).stat().st_size < 16 * 2**20 for f in files)
    s = json.loads((out / "gpu_check.json").read_text())
    assert s["mode"] == "cpu-dry-run" and s["budget"]["threshold"] == 15.0
    for section in ("machine", "bundle", "steps", "training", "inference", "telemetry", "utilization", "ddp", "gpu_vs_cpu", "commit", "load_average"):
        assert s[section], section
    status = {st["name"]: st["status"] for st in s["steps"]}
    assert status.pop("compile/fastnet") == "skipped" and set(status.values()) == {"ok"}, status
    assert {"train/fastnet", "train/fastnet-ddp1", "train/resnet20-dawn", "train/fastnet-cpu", "infer/fastnet", "infer/resnet20-dawn"} <= set(status)

    # every null has its reason; the GPU-only ones say there is no GPU
    sections = [s["machine"], s["ddp"], s["gpu_vs_cpu"], *s["training"].values(), *s["telemetry"].values(), *s["utilization"].values()]
    for section in sections:
        assert set(nulls({k: v for k, v in section.items() if k != "reasons"})) <= set(section["reasons"]), section
    gpu_only = [
        (s["machine"], ("gpu", "peak_row")),
        (s["ddp"], ("nccl",)),
        (s["gpu_vs_cpu"], ("gpu_time_to_accuracy_s", "cpu_over_gpu_time_to_accuracy", "cpu_over_gpu_epoch_time")),
        *((t, ("power_w_mean", "memory_used_mb_max", "energy_to_accuracy_j")) for t in s["telemetry"].values()),
        *((t, ("gpu",)) for name, t in s["training"].items() if name != "fastnet-cpu"),
    ]
    for section, keys in gpu_only:
        for k in keys:
            assert section[k] is None and "no GPU" in section["reasons"][k], (k, section)

    # the numbers are the stages' own, read from their files (kept in the archive)
    with tarfile.open(out / "gpu_check_logs.tar.gz") as tar:
        tta = json.load(tar.extractfile("runs/fastnet/seed0/time_to_accuracy.json"))
        eager = json.load(tar.extractfile("runs/fastnet/seed0/latency/eager.json"))
        names = tar.getnames()
    assert "logs/train-fastnet.log" in names and not [n for n in names if n.endswith(".pt")]
    fast = s["training"]["fastnet"]
    assert fast["device"] == "cpu" and fast["precision"] == "bf16" and fast["train_items"] == 1000
    assert fast["time_to_accuracy_s"] == pytest.approx(tta["time_to_accuracy_hours"] * 3600) and fast["epochs_to_accuracy"] == tta["epochs_to_accuracy"]
    assert sum(fast["epoch_seconds"][: int(tta["epochs_to_accuracy"])]) == pytest.approx(fast["time_to_accuracy_s"])
    backends = s["inference"]["fastnet"]["backends"]
    assert {"eager", "torchscript", "onnxruntime", "onnxruntime-int8"} <= set(backends) and not s["inference"]["fastnet"]["failed"]
    assert backends["eager"]["latency_mean_ms"] == eager["latency_mean_ms"] and set(backends["eager"]["throughput_items_per_second"]) == {"1", "8", "64", "256"}
    assert s["training"]["fastnet-cpu"]["device"] == "cpu" and s["gpu_vs_cpu"]["cpu_time_to_accuracy_s"] == s["training"]["fastnet-cpu"]["time_to_accuracy_s"]
    ddp = s["ddp"]
    assert (ddp["backend"], ddp["launcher"], ddp["world_size"], ddp["data_parallel_path_taken"]) == ("gloo", "torchrun", 1, True)
    assert s["utilization"]["fastnet"]["achieved_tflops_median"] > 0 and s["utilization"]["fastnet"]["peak_method"] != "datasheet"  # this CPU's probe

    # and as a record: refused as a GPU record, kept apart when asked for
    record = subprocess.run(
        [sys.executable, str(ROOT / "bench" / "gpu_record.py"), str(out / "gpu_check.json"), "--record-dir", str(tmp_path / "records")],
        capture_output=True,
        text=True,
        env=tool_env(),
    )
    assert record.returncode == 1 and "field 'mode': 'cpu-dry-run', not a GPU run" in record.stderr and "Traceback" not in record.stderr
    record = subprocess.run(
        [sys.executable, str(ROOT / "bench" / "gpu_record.py"), str(out / "gpu_check.json"), "--record-dir", str(tmp_path / "records"), "--allow-dry-run"],
        capture_output=True,
        text=True,
        env=tool_env(),
    )
    assert record.returncode == 0, record.stderr
    doc = json.loads((tmp_path / "records" / "gpu_check-cpu-dry-run.json").read_text())
    assert doc["result"] == s and doc["commit"] == s["commit"]["commit"] and doc["date"] == s["started"] and doc["machine"]["gpus"] == []


def test_gpu_record_names_a_file_that_is_not_a_check(tmp_path):
    bad = tmp_path / "other.json"
    bad.write_text(json.dumps({"name": "tta", "result": {}}))
    done = subprocess.run([sys.executable, str(ROOT / "bench" / "gpu_record.py"), str(bad)], capture_output=True, text=True, env=tool_env())
    assert (
        done.returncode == 1
        and done.stderr.strip() == f"gpu_record: {bad}: field 'name': not a GPU check's JSON (expected \"gpu_check\", from bench/gpu_check.sh)"
    )
