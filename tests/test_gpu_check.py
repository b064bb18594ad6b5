"""bash bench/gpu_check.sh on this CPU: the offline bundle it makes (for real,
with pip, with and without a size limit), which wheels it installs on a node,
its steps one by one (the JSON rewritten when each starts and ends, a step
that fails or runs out of time leaving the others' results and its own
reason, a later call's steps merged into the same folder), the references it
measures on a GPU (run here with a stand-in for CUDA events: tests named
"fake"), the record and its rendering, and the whole check end to end as its
CPU dry run, whose GPU figures must be null with a reason."""

from __future__ import annotations

import importlib.util
import json
import signal
import subprocess
import sys
import time
from pathlib import Path

import numpy as np
import pandas as pd
import pytest
from conftest import ROOT, tool_env
from nvml_stand_in import FakeGpu, NvmlStandIn
from tiny_training import TEST_LIMIT, THRESHOLD, TRAIN_LIMIT, write_entry

from dawnpipe.models.precision import used_precision
from dawnpipe.pipeline.stages import TRAIN, command_words
from dawnpipe.pipeline.values import train_settings

sys.path.insert(0, str(ROOT / "bench"))
import gpu_bundle
import gpu_check
import gpu_reference
import gpu_summary


def script(name: str):
    """A module of scripts/, loaded from its file (scripts/ is not a package)."""
    spec = importlib.util.spec_from_file_location(f"scripts_{name}", ROOT / "scripts" / f"{name}.py")
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module
    spec.loader.exec_module(module)
    return module


docs = script("docs")

SCRIPT = ROOT / "bench" / "gpu_check.sh"
H100 = "NVIDIA H100 80GB HBM3"


def sh(*args: str, timeout: float = 900, env: dict | None = None) -> subprocess.CompletedProcess:
    return subprocess.run(
        ["bash", str(SCRIPT), *args],
        cwd=ROOT,
        env=tool_env({"GPU_CHECK_PYTHON": sys.executable, **(env or {})}),
        capture_output=True,
        text=True,
        timeout=timeout,
    )


def this_python() -> str:
    return f"{sys.version_info.major}.{sys.version_info.minor}"


def node_packages(path: Path, leave_out: set[str]) -> Path:
    """A node's `pip freeze --all`: this environment's packages but ``leave_out`` (normalized names)."""
    done = subprocess.run([sys.executable, "-m", "pip", "freeze", "--all"], capture_output=True, text=True, check=True)
    lines = [line for line in done.stdout.splitlines() if gpu_bundle.normalize(line.split("==")[0].split(" @ ")[0]) not in leave_out]
    path.write_text("\n".join(lines) + "\n", encoding="utf-8")
    return path


NODE_LACKS = {"jsonschema", "referencing", "connection-pool"}  # connection-pool: published as source only


@pytest.fixture(scope="module")
def bundle(tmp_path_factory, fashion_mnist_source) -> Path:
    """The bundle `prepare` makes for a node that lacks NODE_LACKS and has its own torch, for Python 3.12, no size limit."""
    tmp = tmp_path_factory.mktemp("gpu-bundle")
    node = node_packages(tmp / "node.txt", NODE_LACKS)
    done = sh("prepare", "--bundle", str(tmp / "bundle"), "--data-from", fashion_mnist_source, "--node-packages", str(node), "--python-version", "3.12")
    assert done.returncode == 0, done.stdout + done.stderr
    return tmp / "bundle"


# ---------------------------------------------------------------- the bundle
def test_bundle_holds_what_the_node_lacks_at_the_pins_for_its_python_and_says_what_it_left_out(bundle):
    pinned = gpu_bundle.pins()
    doc = json.loads((bundle / "bundle.json").read_text())
    wheels = sorted((bundle / "wheels").glob("*.whl"))
    got = dict(gpu_bundle.wheel_name_version(w) for w in wheels)
    # what the node lacks and the check needs, nothing else, each at constraints.txt's pin
    needed = set(gpu_bundle.closure(gpu_bundle.requirements(), "3.12", "x86_64"))
    assert set(got) == NODE_LACKS & needed and all(got[n] == pinned[n] for n in got)
    assert [w["wheel"] for w in doc["wheels"]] == [w.name for w in wheels] and doc["total_bytes"] == sum(w.stat().st_size for w in wheels) + doc["data"][
        "bytes"
    ]
    assert "connection_pool-0.0.3-py3-none-any.whl" in [w.name for w in wheels]  # built here: PyPI has only its source
    # left out: everything else the check needs, each because the node has it; its torch and the CUDA stack among them
    left = {r["package"]: r["reason"] for r in doc["left_out"]}
    assert set(left) == needed - set(got)
    assert left["torch"].startswith("present on the node (torch ") and left["snakemake"].startswith("present on the node")
    assert sorted(p.name for p in (bundle / "fashion-mnist").iterdir()) == sorted(gpu_bundle.DATA_FILES)
    assert doc["python_version"] == "3.12" and doc["max_mib"] is None and doc["commit"] and isinstance(doc["dirty"], bool)


def test_bundle_for_a_node_without_torch_leaves_out_what_the_size_limit_does_not_hold(bundle, tmp_path):
    node = node_packages(tmp_path / "node.txt", NODE_LACKS | {n for n in gpu_bundle.closure(["torch"], this_python(), "x86_64")})
    limit = 40.0  # Fashion-MNIST's 30 MiB, then the smallest wheels
    done = sh("prepare", "--bundle", str(tmp_path / "b"), "--data-from", str(bundle / "fashion-mnist"), "--node-packages", str(node), "--max-mib", f"{limit:g}")
    assert done.returncode == 0, done.stdout + done.stderr
    doc = json.loads((tmp_path / "b" / "bundle.json").read_text())
    assert doc["total_bytes"] <= limit * 2**20 and doc["max_mib"] == limit
    kept = {w["package"] for w in doc["wheels"]}
    over = {r["package"]: r["reason"] for r in doc["left_out"] if r["reason"].startswith("over the size limit")}
    assert {"torch", "triton", "nvidia-cudnn-cu13"} <= set(over) and not kept & set(over)
    assert "MiB left of --max-mib 40" in over["torch"]
    assert "left out: torch 2.14.1: over the size limit" in done.stdout  # said on the terminal too, each with its reason
    assert doc["total_bytes"] == doc["data"]["bytes"] + sum(w["bytes"] for w in doc["wheels"])


def test_bad_bundle_input_is_one_line(bundle, tmp_path):
    bad = tmp_path / "node.txt"
    bad.write_text("torch==2.5.1\nthis is not a package line\n")
    done = sh("prepare", "--bundle", str(tmp_path / "b"), "--data-from", str(bundle / "fashion-mnist"), "--node-packages", str(bad))
    assert (
        done.returncode == 1
        and done.stderr.strip() == f"gpu bundle: {bad}: line 2: not 'name==version' or 'name @ url' (the output of `python3 -m pip freeze`)"
    )
    done = sh("prepare", "--bundle", str(tmp_path / "b"), "--data-from", str(bundle / "fashion-mnist"), "--max-mib", "10")
    assert done.returncode == 1 and "--max-mib 10: Fashion-MNIST's raw files alone take" in done.stderr and "Traceback" not in done.stderr


def test_only_missing_or_older_packages_are_installed_and_never_the_cuda_stack_over_a_torch(tmp_path):
    have = gpu_bundle.installed_version("jsonschema")
    names = (f"jsonschema-{have}-py3-none-any.whl", "typing_extensions-999.0-py3-none-any.whl", "no_such_package_here-1.0-py3-none-any.whl")
    names += ("torch-9.9.9-cp311-cp311-manylinux_2_28_x86_64.whl", "nvidia_nccl_cu13-99.0-py3-none-manylinux_2_18_x86_64.whl")
    for name in names:
        (tmp_path / name).write_bytes(b"")
    plan = {p["package"]: p for p in gpu_bundle.install_plan(tmp_path)}
    assert plan["jsonschema"]["install"] is False and plan["jsonschema"]["installed"] == have
    assert plan["typing-extensions"]["install"] is True and plan["typing-extensions"]["why"].startswith("older")
    assert plan["no-such-package-here"]["install"] is True and plan["no-such-package-here"]["installed"] is None
    for name in ("torch", "nvidia-nccl-cu13"):  # newer in the bundle, and still this Python's own torch is kept
        assert plan[name]["install"] is False and plan[name]["why"] == f"the node's own torch {gpu_bundle.installed_version('torch')} is kept"


# ---------------------------------------------------------------- steps, the JSON, merging
def step(name: str, cap: float = 60.0) -> gpu_check.Step:
    return gpu_check.Step(name, "a test step", cap, cap)


def test_the_json_is_rewritten_when_a_step_starts_and_ends_and_a_failed_or_stopped_step_keeps_the_others(tmp_path):
    out = tmp_path / "out"
    check = gpu_check.Check(gpu_check.DRY_RUN, out, None, ["run", "--cpu-dry-run"])
    seen = tmp_path / "seen.json"
    # a step that reads the check's JSON while it runs: its own record says "running"
    read = f"import json, shutil; shutil.copyfile({str(out / 'gpu_check.json')!r}, {str(seen)!r})"
    assert check.run_process(step("first"), [sys.executable, "-c", read])["status"] == "ok"
    assert json.loads(seen.read_text())["steps"]["first"]["status"] == "running"
    failed = check.run_process(step("second"), [sys.executable, "-c", "import sys; print('error: the second step broke'); sys.exit(3)"])
    stopped = check.run_process(step("third", cap=1.0), [sys.executable, "-c", "import time; time.sleep(30)"])
    doc = json.loads((out / "gpu_check.json").read_text())
    assert doc["steps"]["first"]["status"] == "ok"
    assert doc["steps"]["second"] == failed and failed["status"] == "failed" and failed["reason"] == "exit 3: error: the second step broke"
    assert doc["steps"]["third"] == stopped and stopped["status"] == "timeout" and stopped["reason"] == "stopped at its time limit of 1 s"
    assert (out / "logs" / "second.log").read_text() == "error: the second step broke\n"
    # every null of the JSON carries its reason, here where nothing was measured
    for section in [doc["machine"], doc["ddp"], doc["gpu_vs_cpu"], doc["program"], *doc["training"].values(), *doc["telemetry"].values()]:
        assert {k for k, v in section.items() if v is None} <= set(section["reasons"]), section
    assert doc["training"]["fastnet"]["reasons"]["time_to_accuracy_s"].startswith("step fastnet has not run in this folder")

    # a later call in the same folder: its step replaces its own record, the others' are kept
    again = gpu_check.Check(gpu_check.DRY_RUN, out, None, ["run", "--cpu-dry-run", "--steps", "second"])
    again.run_process(step("second"), [sys.executable, "-c", "pass"])
    doc = json.loads((out / "gpu_check.json").read_text())
    assert doc["steps"]["first"]["status"] == "ok" and doc["steps"]["third"]["status"] == "timeout" and doc["steps"]["second"]["status"] == "ok"
    assert [i["steps"] for i in doc["invocations"]] == [["first", "second", "third"], ["second"]]
    # ...but never a GPU check into a dry run's folder, nor into a file that is not the check's
    with pytest.raises(gpu_check.UsageError, match="field 'mode': 'cpu-dry-run', and this is a gpu check: give another --out"):
        gpu_check.Check(gpu_check.GPU, out, None, ["run"])
    (tmp_path / "other").mkdir()
    (tmp_path / "other" / "gpu_check.json").write_text('{"name": "tta"}')
    with pytest.raises(gpu_check.UsageError, match="not a GPU check's JSON"):
        gpu_check.Check(gpu_check.DRY_RUN, tmp_path / "other", None, ["run"])


def test_a_step_cut_at_its_cap_by_design_is_a_result(tmp_path):
    check = gpu_check.Check(gpu_check.DRY_RUN, tmp_path, None, ["run"])
    record = check.run_process(gpu_check.Step("cpu", "x", 1, 1, cut_at_cap=True), [sys.executable, "-c", "import time; time.sleep(30)"])
    assert record["status"] == "ok" and record["cut_at_cap"] is True and "as planned" in record["reason"]


def test_steps_are_chosen_by_name_and_listed():
    assert [s.name for s in gpu_check.parse_steps("resnet20-dawn,latency")] == ["install", "probe", "latency", "resnet20-dawn"]
    assert [s.name for s in gpu_check.parse_steps(None)] == [s.name for s in gpu_check.STEPS]
    listed = sh("--list-steps")
    assert listed.returncode == 0 and all(f"\n{s.name} " in listed.stdout for s in gpu_check.STEPS)
    assert all(s.name in sh("--help").stdout for s in gpu_check.STEPS)
    bad = sh("--out", "/tmp/x", "--steps", "fastnet,nosuch")
    assert bad.returncode == 2 and bad.stderr.strip().splitlines() == [f"gpu check: --steps: unknown step nosuch (the steps: {', '.join(gpu_check.BY_NAME)})"]
    assert sh("--steps", "fastnet").stderr.strip() == "gpu check: --out DIR is required: where gpu_check.json, the logs and the runs go"


@pytest.mark.slow
def test_the_gpu_check_without_a_gpu_stops_after_the_probe_and_says_why(tmp_path):
    done = sh("--out", str(tmp_path), "--steps", "fastnet", timeout=300)
    assert done.returncode == 1, done.stdout + done.stderr
    doc = json.loads((tmp_path / "gpu_check.json").read_text())
    assert doc["mode"] == "gpu" and doc["steps"]["install"]["status"] == "ok"
    probe = doc["steps"]["probe"]
    assert probe["status"] == "failed" and probe["reason"].startswith("no CUDA device: torch.cuda.is_available() is False")
    assert doc["steps"]["fastnet"] == {**doc["steps"]["fastnet"], "status": "skipped", "reason": "no GPU: the probe found no CUDA device"}
    assert not (tmp_path / "pipeline").exists()  # nothing trained on the CPU in the GPU check's name


@pytest.mark.slow
def test_a_check_stopped_by_sigterm_records_the_step_it_stopped(tmp_path, bundle):
    proc = subprocess.Popen(
        ["bash", str(SCRIPT), "--cpu-dry-run", "--out", str(tmp_path), "--bundle", str(bundle), "--steps", "data"],
        cwd=ROOT,
        env=tool_env({"GPU_CHECK_PYTHON": sys.executable}),
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    deadline = time.monotonic() + 300
    while time.monotonic() < deadline:
        doc = gpu_summary.read_json(tmp_path / "gpu_check.json")
        log = tmp_path / "logs" / "data.log"
        if doc and (doc["steps"].get("data") or {}).get("status") == "running" and log.is_file() and log.stat().st_size:
            break  # Snakemake has started
        assert proc.poll() is None, proc.communicate()
        time.sleep(0.05)
    proc.send_signal(signal.SIGTERM)
    out, err = proc.communicate(timeout=120)
    assert proc.returncode == 143, out + err
    doc = json.loads((tmp_path / "gpu_check.json").read_text())
    assert doc["steps"]["probe"]["status"] == "ok" and doc["steps"]["data"]["status"] == "interrupted"
    assert doc["steps"]["data"]["reason"] == "the check was stopped (SIGTERM)"


@pytest.mark.slow
def test_a_failed_pipeline_step_names_the_stage_and_its_log(tmp_path, bundle):
    broken = tmp_path / "bundle"
    (broken / "fashion-mnist").mkdir(parents=True)
    for f in gpu_bundle.DATA_FILES:
        data = (bundle / "fashion-mnist" / f).read_bytes()
        (broken / "fashion-mnist" / f).write_bytes(data[: len(data) // 2] if f.startswith("t10k-labels") else data)
    done = sh("--cpu-dry-run", "--out", str(tmp_path / "out"), "--bundle", str(broken), "--steps", "data", timeout=600)
    assert done.returncode == 1, done.stdout + done.stderr
    record = json.loads((tmp_path / "out" / "gpu_check.json").read_text())["steps"]["data"]
    assert record["status"] == "failed" and record["reason"].startswith("rule fetch failed: ")
    assert "t10k-labels-idx1-ubyte.gz" in record["reason"] and record["reason"].endswith("(log pipeline/results/logs/fetch/fashion-mnist.log)")


# ---------------------------------------------------------------- the references, with a stand-in for CUDA events
class FakeEvent:
    """Stands in for torch.cuda.Event(enable_timing=True): the host's clock when recorded (no GPU queues work here)."""

    def record(self):
        self.t = time.perf_counter()

    def elapsed_time(self, end: FakeEvent) -> float:
        return (end.t - self.t) * 1e3  # milliseconds, as CUDA's


def no_sync():
    pass


class ProbeNvml(NvmlStandIn):
    """The stand-in NVML with the system calls the probe makes (driver and its CUDA version, power limit)."""

    def nvmlSystemGetDriverVersion(self):
        return b"580.65.06"

    def nvmlSystemGetCudaDriverVersion_v2(self):
        return 13000

    def nvmlDeviceGetPowerManagementLimit(self, h):
        return 700_000


def test_fake_nvml_probe_names_the_driver_its_cuda_and_the_card(monkeypatch):
    import gpu_probe

    from dawnpipe.telemetry import nvml

    real = nvml.NvmlGpus
    monkeypatch.setattr(nvml, "NvmlGpus", lambda: real(nvml=ProbeNvml([FakeGpu(H100, "GPU-0")]), visible="0"))
    facts = gpu_probe.nvml_facts()
    assert facts["driver"] == "580.65.06" and facts["driver_cuda"] == "13.0"
    assert facts["devices"] == [{"index": 0, "name": H100, "memory_total_mib": 16384, "power_limit_w": 700.0, "energy_counter": True}]
    rows = gpu_probe.peak_rows([H100, "NVIDIA Some Future Part"])
    assert rows[H100]["device"] == H100 and rows[H100]["bf16"] == 989.5 and rows[H100]["fp32"] == 67.0
    assert rows["NVIDIA Some Future Part"] == {"device": None, "reason": "'NVIDIA Some Future Part' is not in src/dawnpipe/telemetry/peaks.yaml"}


def test_fake_cuda_events_time_the_matrix_products_beside_the_datasheet():
    import torch

    before = (torch.backends.cudnn.allow_tf32, torch.backends.cuda.matmul.allow_tf32)
    try:
        doc = gpu_reference.peak(device="cpu", new_event=FakeEvent, sync=no_sync, n=96, device_name=H100)
        assert doc["tf32_allowed"] == {"cudnn": False, "matmul": False} and doc["datasheet"]["device"] == H100
    finally:
        torch.backends.cudnn.allow_tf32, torch.backends.cuda.matmul.allow_tf32 = before
    for precision, sheet in (("bf16", 989.5), ("fp32", 67.0)):
        r = doc["precisions"][precision]
        assert r["tflops_best"] == pytest.approx(2 * 96**3 * r["repeats"] / min(r["seconds"]) / 1e12)
        assert r["datasheet_tflops"] == sheet and r["measured_over_datasheet"] == pytest.approx(r["tflops_best"] / sheet)


@pytest.fixture(scope="module")
def fake_events_clock(tmp_path_factory, prepared_fashion_mnist) -> Path:
    """A tiny real training run by dawnpipe's loop in this process, with stand-in events around its clock."""
    tmp = tmp_path_factory.mktemp("clock")
    entry = write_entry(tmp / "tiny.yaml")
    settings = train_settings(THRESHOLD, train_limit=TRAIN_LIMIT, test_limit=TEST_LIMIT)
    run = {"entry_file": entry, "seed": 0, "data": prepared_fashion_mnist, "threads": 1, "telemetry_interval": 0, "settings": settings}
    doc = gpu_reference.clock(command_words(TRAIN, run)[1:], tmp / "clock", new_event=FakeEvent, sync=no_sync)
    (tmp / "clock" / "clock.json").write_text(json.dumps(doc))
    return tmp / "clock"


def test_fake_cuda_events_bracket_each_epoch_of_the_training_clock(fake_events_clock):
    from dawnpipe.train import loop

    doc = json.loads((fake_events_clock / "clock.json").read_text())
    tsv = pd.read_csv(fake_events_clock / "train.tsv", sep="\t")
    assert len(doc["epochs"]) == len(tsv) >= 1  # one region per epoch trained, no more
    for e, hours in zip(doc["epochs"], np.diff([0.0, *tsv["hours"]])):
        assert 0 < e["events_s"] <= e["clock_s"]  # the events sit inside the clock's synchronize calls
        assert e["tsv_s"] == pytest.approx(e["clock_s"], abs=1e-6) and e["tsv_s"] == pytest.approx(hours * 3600, abs=1e-6)  # what the run published
    assert doc["clock_over_events"] == pytest.approx(doc["clock_total_s"] / doc["events_total_s"]) and doc["clock_over_events"] >= 1
    assert loop.TrainingClock.running.__name__ == "running" and loop.TrainingClock.running.__module__ == "dawnpipe.train.loop"  # put back


def test_fake_cuda_events_around_each_item_of_the_stage_timing_loop(fake_events_clock, prepared_fashion_mnist, tmp_path):
    doc = gpu_reference.latency(
        fake_events_clock / "model.pt", prepared_fashion_mnist, backends=("eager",), device="cpu", warmup=3, limit=40, new_event=FakeEvent, sync=no_sync
    )
    r = doc["backends"]["eager"]
    assert doc["items"] == r["items"] == 40 and r["items_clock_below_events"] == 0  # each item's events inside its clock
    assert r["clock_over_events"] == pytest.approx(r["clock_mean_ms"] / r["events_mean_ms"]) and r["stage_mean_ms"] is None


# ---------------------------------------------------------------- a GPU run's summary and record (NVML and CUDA events faked)
@pytest.fixture(scope="module")
def fake_gpu_check(tmp_path_factory, fake_events_clock, prepared_fashion_mnist) -> Path:
    """A check's folder as a GPU run leaves it for fastnet, from real files: the run's utilization made by the
    utilization stage's code from stand-in NVML samples, the references made with stand-in events."""
    from dawnpipe.metrics.utilization import utilization
    from dawnpipe.telemetry.nvml import NvmlGpus

    out = tmp_path_factory.mktemp("fake-gpu-check")
    run = out / "pipeline" / "results" / "runs" / "fastnet" / "seed0"
    run.mkdir(parents=True)
    gpus = NvmlGpus(nvml=NvmlStandIn([FakeGpu(H100, "GPU-0", power_mw=300_000, energy_mj_per_call=30_000)]), visible="0")
    samples = pd.DataFrame([{"t_s": t, **r} for t in np.arange(0.0, 60.0, 0.1) for r in gpus.sample()])  # 300 W; its counter 300 J/s
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
    info = {
        "entry": "fastnet",
        "seed": 0,
        "task": "fashion-mnist",
        "framework": "pytorch",
        "threshold": 93.0,
        "demo_threshold": False,
        "settings": {"entry": {"hyperparameters": {"precision": "bf16"}}},
        "environment": {"device": "cuda:0", "cpu_model": "host CPU", "gpus": [H100], "world_size": 1},
        "telemetry": {"training_clock_origin_s": 5.0, "interval_s": 0.1, "devices": [{"device": "gpu0", "kind": "gpu", "name": H100}]},
        "result": {"train_items": 60000, "wall_hours": 24 / 3600},
    }
    flops = {"counted": True, "flops_per_item": 1e8, "arithmetic_intensity": 30.0}
    (run / "utilization.json").write_text(json.dumps(utilization(log, info, flops, samples)))
    (run / "run.json").write_text(json.dumps(info))
    log[["epoch", "hours", "top1Accuracy"]].to_csv(run / "train.tsv", sep="\t", index=False)
    tta = {"reached": True, "time_to_accuracy_hours": 20 / 3600, "epochs_to_accuracy": 2.0, "threshold": 93.0}
    (run / "time_to_accuracy.json").write_text(json.dumps(tta))
    steps = out / "steps"
    (steps / "clock").mkdir(parents=True)
    (steps / "clock" / "clock.json").write_text((fake_events_clock / "clock.json").read_text())
    peak = gpu_reference.peak(device="cpu", new_event=FakeEvent, sync=no_sync, n=64, device_name=H100)
    (steps / "peak.json").write_text(json.dumps(peak))
    latency = gpu_reference.latency(
        fake_events_clock / "model.pt", prepared_fashion_mnist, backends=("eager",), device="cpu", warmup=2, limit=20, new_event=FakeEvent, sync=no_sync
    )
    (steps / "latency.json").write_text(json.dumps(latency))
    probe = {
        "python": "3.12.3",
        "platform": "Linux",
        "cpu_model": "host CPU",
        "cpu_count": 16,
        "memory_gib": 128.0,
        "packages": {},
        "requirements": {"missing": []},
        "torch": {"version": "2.14.1", "cuda": "13.0", "cudnn": 92400, "cuda_available": True, "path": "/usr/lib/python3/torch", "origin": "this Python's own"},
        "nvml": {"status": "NVML", "driver": "580.1", "driver_cuda": "13.0", "devices": [{"name": H100, "power_limit_w": 700.0, "energy_counter": True}]},
        "onnxruntime_providers": ["CPUExecutionProvider"],
        "peaks": {H100: {"device": H100, "bf16": 989.5}},
    }
    probe["torch"]["devices"] = [{"name": H100, "compute_capability": "9.0", "multiprocessors": 132, "memory_gib": 79.2}]
    (steps / "probe.json").write_text(json.dumps(probe))
    doc = {"steps": {n: {"status": "ok", "seconds": 1.0} for n in ("install", "probe", "peak", "fastnet", "latency", "clock")}, "invocations": []}
    doc["invocations"].append(
        {"argv": ["run", "--out", str(out)], "steps": list(doc["steps"]), "load_average": {"start": [0.1, 0.1, 0.1], "end": [1.0, 0.5, 0.2]}}
    )
    (out / "gpu_check.json").write_text(json.dumps(gpu_summary.summarize(out, {**doc, "started": "2026-01-01T00:00:00+00:00"}, "gpu")))
    return out


def test_fake_gpu_summary_sets_each_figure_beside_its_reference(fake_gpu_check):
    s = json.loads((fake_gpu_check / "gpu_check.json").read_text())
    t, tele = s["training"]["fastnet"], s["telemetry"]["fastnet"]
    assert t["device"] == "cuda:0" and t["gpu"] == H100 and t["time_to_accuracy_s"] == pytest.approx(20.0) and t["epoch_seconds"] == pytest.approx([10.0, 10.0])
    assert tele["power_w_mean"] == 300.0 and tele["energy_to_accuracy_j"] == pytest.approx(300.0 * 20, rel=1e-6)
    refs = s["references"]
    # energy: the counter's joules against the mean power times the seconds of the same epochs
    e = refs["energy"]["fastnet"]
    assert e["mean_power_times_time_j"] == pytest.approx(300.0 * 20) and e["counter_over_power_time"] == pytest.approx(1.0, rel=1e-6) and e["within"] is True
    # utilization: the run's achieved rate against the bf16 matrix product measured, and the datasheet's
    peak = json.loads((fake_gpu_check / "steps" / "peak.json").read_text())
    u = refs["utilization"]["runs"]["fastnet"]
    assert u["matmul_tflops"] == peak["precisions"]["bf16"]["tflops_best"] and u["achieved_over_matmul"] == pytest.approx(
        1e8 * 6000 / 1e12 / u["matmul_tflops"]
    )
    assert u["fraction_of_datasheet"] == pytest.approx(1e8 * 6000 / 1e12 / 989.5)
    assert refs["peak"]["precisions"]["bf16"]["within"] is True  # a CPU's 64 x 64 product is far below the H100's datasheet
    assert refs["training_clock"]["clock_over_events"] >= 1 and refs["training_clock"]["within"] is not None
    assert refs["inference_latency"]["backends"]["eager"]["items"] == 20
    assert s["machine"]["driver"] == "580.1" and s["machine"]["torch"]["origin"] == "this Python's own"


def test_fake_gpu_record_and_its_rendering_in_the_docs(fake_gpu_check, tmp_path):
    done = subprocess.run(
        [sys.executable, str(ROOT / "bench" / "gpu_record.py"), str(fake_gpu_check / "gpu_check.json"), "--record-dir", str(tmp_path)],
        capture_output=True,
        text=True,
        env=tool_env(),
    )
    assert done.returncode == 0, done.stderr
    record = json.loads((tmp_path / "gpu_check.json").read_text())
    s = json.loads((fake_gpu_check / "gpu_check.json").read_text())
    assert record["result"] == s and record["date"] == s["started"] and record["command"] == "bash bench/gpu_check.sh --out DIR"
    assert (
        record["machine"]["gpus"] == [H100]
        and record["machine"]["driver"] == "580.1"
        and record["load_average"] == {"start": [0.1] * 3, "end": [1.0, 0.5, 0.2]}
    )
    page = tmp_path / "gpu.md"
    page.write_text("# GPU\n\n<!-- generated: gpu_check.json -->\nold\n<!-- end generated -->\n")
    text = docs.generate(page.read_text(), page)
    e = s["references"]["energy"]["fastnet"]
    assert f"**{H100}**, driver 580.1 (CUDA 13.0); torch 2.14.1 built for CUDA 13.0 (this Python's own)" in text
    assert "| `fastnet` | cuda:0 | bf16 | 20.0 s to 93% | 2 | 10.00 | 10.00 |" in text
    assert f"| {docs.ratio(e['counter_over_power_time'])} | yes (0.9-1.1) |" in text and "CUDA events around the same epochs" in text
    assert "| `resnet20-dawn` | - | - | - | - | - | - |" in text  # not run: dashes, never a number from elsewhere


def test_docs_say_not_measured_until_a_record_exists(tmp_path):
    page = tmp_path / "gpu.md"
    page.write_text("<!-- generated: measurements/gpu_check.json -->\n<!-- end generated -->\n")
    assert docs.render_block(page, "measurements/gpu_check.json") == (
        "Not measured yet: run `bash bench/gpu_check.sh --out DIR` on a machine with one NVIDIA GPU, "
        "then `python bench/gpu_record.py DIR/gpu_check.json`, then `make docs`.\n"
    )


def test_gpu_record_names_a_file_that_is_not_a_check(tmp_path):
    bad = tmp_path / "other.json"
    bad.write_text(json.dumps({"name": "tta", "result": {}}))
    done = subprocess.run([sys.executable, str(ROOT / "bench" / "gpu_record.py"), str(bad)], capture_output=True, text=True, env=tool_env())
    assert (
        done.returncode == 1
        and done.stderr.strip() == f"gpu_record: {bad}: field 'name': not a GPU check's JSON (expected \"gpu_check\", from bench/gpu_check.sh)"
    )


# ---------------------------------------------------------------- the whole check, on this CPU
def nulls(section: dict) -> list[str]:
    return [k for k, v in section.items() if v is None]


@pytest.mark.slow
def test_cpu_dry_run_runs_every_step_and_invents_no_gpu_number(bundle, tmp_path):
    out = tmp_path / "out"
    done = sh("--cpu-dry-run", "--out", str(out), "--bundle", str(bundle), timeout=1800)
    assert done.returncode == 0, done.stdout[-4000:] + done.stderr[-2000:]
    assert "[gpu-check" in done.stdout and "gpu check (cpu-dry-run)" in done.stdout  # progress lines, then the summary
    assert {"gpu_check.json", "gpu_check.txt", "logs", "pipeline", "steps"} <= {p.name for p in out.iterdir()}
    s = json.loads((out / "gpu_check.json").read_text())
    assert s["mode"] == "cpu-dry-run" and (out / "gpu_check.txt").read_text() == gpu_summary.text(s)
    status = {name: st["status"] for name, st in s["steps"].items()}
    assert list(status) == [st.name for st in gpu_check.STEPS]
    assert {n: st["status"] for n, st in s["steps"].items() if st.get("by_design")} == {"peak": "skipped", "latency": "skipped", "clock": "skipped"}
    assert {v for n, v in status.items() if n not in ("peak", "latency", "clock")} == {"ok"}, status
    assert s["machine"]["missing_packages"] == [] and s["machine"]["missing_optional_packages"] == []
    # the bundle: its wheels are what this Python has already, so nothing is installed
    assert s["steps"]["install"]["plan"] and not [p for p in s["steps"]["install"]["plan"] if p["install"]]

    # every null has its reason; the GPU figures say there is no GPU
    sections = [s["machine"], s["ddp"], s["gpu_vs_cpu"], s["program"], *s["training"].values(), *s["telemetry"].values(), *s["utilization"].values()]
    sections += [s["references"]["peak"], s["references"]["training_clock"], s["references"]["inference_latency"], *s["references"]["energy"].values()]
    for section in sections:
        assert set(nulls({k: v for k, v in section.items() if k != "reasons"})) <= set(section["reasons"]), section
    gpu_only = [
        (s["machine"], ("gpu", "driver", "peak_row")),
        (s["ddp"], ("nccl",)),
        (s["gpu_vs_cpu"], ("gpu_time_to_accuracy_s", "cpu_over_gpu_time_to_accuracy", "cpu_over_gpu_epoch_time")),
        *((t, ("power_w_mean", "memory_used_mb_max", "energy_to_accuracy_j")) for t in s["telemetry"].values()),
        *((t, ("gpu",)) for name, t in s["training"].items() if name != "fastnet-cpu"),
        *((e, ("counter_over_power_time",)) for e in s["references"]["energy"].values()),
    ]
    for section, keys in gpu_only:
        for k in keys:
            assert section[k] is None and "no GPU" in section["reasons"][k], (k, section)
    for ref in ("peak", "training_clock", "inference_latency"):
        assert "no GPU in a dry run" in next(iter(s["references"][ref]["reasons"].values()))

    # the numbers are the pipeline's own, read from its files in DIR/pipeline
    runs = out / "pipeline" / "results" / "runs"
    tta = json.loads((runs / "fastnet" / "seed0" / "time_to_accuracy.json").read_text())
    eager = json.loads((runs / "fastnet" / "seed0" / "latency" / "eager.json").read_text())
    fast = s["training"]["fastnet"]
    native = used_precision("auto", "cpu")[0]  # fastnet's precision: auto, bf16 on a CPU with bf16 instructions, else fp32
    assert fast["device"] == "cpu" and fast["precision"] == native and fast["train_items"] == 1000 and fast["threshold"] == 15.0
    assert fast["time_to_accuracy_s"] == pytest.approx(tta["time_to_accuracy_hours"] * 3600) and fast["epochs_to_accuracy"] == tta["epochs_to_accuracy"]
    assert sum(fast["epoch_seconds"][: int(tta["epochs_to_accuracy"])]) == pytest.approx(fast["time_to_accuracy_s"])
    backends = s["inference"]["fastnet"]["backends"]
    assert set(backends) == {"eager", "torchscript", "onnxruntime", "onnxruntime-int8"} and not s["inference"]["fastnet"]["failed"]
    assert backends["eager"]["latency_mean_ms"] == eager["latency_mean_ms"] and set(backends["eager"]["throughput_items_per_second"]) == {"1", "8", "64", "256"}
    assert s["training"]["resnet20-dawn"]["precision"] == "fp32" and s["inference"]["resnet20-dawn"]["backends"]
    # the program entry: trained, its ONNX model scored and answered by ONNX Runtime
    p = s["program"]
    assert p["device"] == "cpu" and p["model_format"] == "onnx" and p["scored_by"] == "ONNX Runtime, CPUExecutionProvider"
    assert set(p["inference_devices"]) == {"onnxruntime", "onnxruntime-int8"}
    # the variants: DDP's launcher and process group at world size 1 (gloo here); the same entry on the CPU
    ddp = s["ddp"]
    assert (ddp["backend"], ddp["launcher"], ddp["world_size"], ddp["data_parallel_path_taken"]) == ("gloo", "torchrun", 1, True)
    assert "no communication between GPUs" in ddp["what_it_exercises"]
    assert (
        s["training"]["fastnet-cpu"]["device"] == "cpu" and s["gpu_vs_cpu"]["cpu_epoch_seconds_median"] == s["training"]["fastnet-cpu"]["epoch_seconds_median"]
    )
    assert s["utilization"]["fastnet"]["achieved_tflops_median"] > 0 and s["utilization"]["fastnet"]["peak_method"] != "datasheet"  # this CPU's probe

    # a later call of one step merges: its record replaced, the others' kept, every figure read again from the same files
    again = sh("--cpu-dry-run", "--out", str(out), "--bundle", str(bundle), "--steps", "cpu", timeout=600)
    assert again.returncode == 0, again.stdout[-3000:] + again.stderr[-2000:]
    merged = json.loads((out / "gpu_check.json").read_text())
    assert [i["steps"] for i in merged["invocations"]] == [list(status), ["install", "probe", "cpu"]]
    assert merged["steps"]["fastnet"] == s["steps"]["fastnet"] and merged["steps"]["cpu"]["started"] > s["steps"]["cpu"]["started"]
    # (the CPU run again only if the code changed since: Snakemake's rerun triggers)
    assert {k: v for k, v in merged["training"].items() if k != "fastnet-cpu"} == {k: v for k, v in s["training"].items() if k != "fastnet-cpu"}
    assert merged["inference"] == s["inference"]

    # and as a record: refused as a GPU record, kept apart when asked for, and rendered
    args = [sys.executable, str(ROOT / "bench" / "gpu_record.py"), str(out / "gpu_check.json"), "--record-dir", str(tmp_path / "records")]
    record = subprocess.run(args, capture_output=True, text=True, env=tool_env())
    assert record.returncode == 1 and "field 'mode': 'cpu-dry-run', not a GPU run" in record.stderr and "Traceback" not in record.stderr
    record = subprocess.run([*args, "--allow-dry-run"], capture_output=True, text=True, env=tool_env())
    assert record.returncode == 0, record.stderr
    doc = json.loads((tmp_path / "records" / "gpu_check-cpu-dry-run.json").read_text())
    assert doc["result"] == merged and doc["date"] == merged["started"] and doc["machine"]["gpus"] == []
    assert (
        doc["command"]
        == f"bash bench/gpu_check.sh --cpu-dry-run --out DIR --bundle {bundle}, then bash bench/gpu_check.sh --cpu-dry-run --out DIR --bundle {bundle} --steps cpu"
    )
    rendered = "\n".join(docs.render_gpu_check(doc))
    assert f"| `fastnet` | cpu | {native} | {docs.num(fast['time_to_accuracy_s'], 1, ' s')} to 15% |" in rendered
