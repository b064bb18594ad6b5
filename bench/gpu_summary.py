"""gpu_check.json, made from the files the GPU check's steps left in its
folder and from nothing else: every number is read from a run's run.json,
train.tsv, time_to_accuracy.json, latency/<backend>.json or
utilization.json (DIR/pipeline/results/runs/<run>/seed0/), from the
references of bench/gpu_reference.py (DIR/steps/) or from the machine's probe.
What could not be measured is null, and the section's ``reasons`` says why (a
step that failed, ran out of time or has not run; a run on the CPU: "no GPU").

Sections:

- ``machine``: GPU, driver and its CUDA, the torch the check ran with (its
  version, CUDA build and where it is installed), the peaks.yaml row;
- ``steps``: each step's status, seconds, log, reason; ``invocations``: each
  call of the check in this folder, with the steps it ran;
- ``training`` (per run: device, precision, time to the threshold, epochs,
  seconds per epoch), ``inference`` (per run and backend: device, latency,
  throughput at batch 1, 8, 64 and 256), ``telemetry`` (NVML power, memory,
  energy to accuracy), ``utilization`` (achieved TFLOP/s against the peak of
  the run's precision);
- ``ddp`` (the world-size-1 run), ``gpu_vs_cpu`` (fastnet on the GPU against
  the same entry on the machine's CPU), ``program`` (torch-fmnist);
- ``references``: each figure beside the reference measured on the card in
  the same run, with the ratio and whether it is within ``TOLERANCE``:
  ``peak`` (the matrix products against the datasheet row),
  ``utilization`` (each run's achieved rate against the matrix product of
  its precision), ``training_clock`` (the clock against CUDA events around
  the same epochs), ``inference_latency`` (the stage's timing against CUDA
  events around the same items), ``energy`` (NVML's energy counter against
  mean power times time over the same epochs).
"""

from __future__ import annotations

import csv
import datetime as dt
import json
import re
import statistics
from pathlib import Path
from typing import Any

import gpu_bundle

RUN_STEP = {"fastnet": "fastnet", "resnet20-dawn": "resnet20-dawn", "torch-fmnist": "torch-fmnist", "fastnet-ddp1": "ddp", "fastnet-cpu": "cpu"}
ZOO = ("fastnet", "resnet20-dawn")
INFERENCE_RUNS = ("fastnet", "resnet20-dawn", "torch-fmnist")
VARIANT = {"fastnet-ddp1": "data-parallel at world size 1 (torchrun, a process group, DDP)", "fastnet-cpu": "on the CPU (device: cpu)"}
LATENCY_KEYS = ("latency_mean_ms", "latency_p50_ms", "latency_p90_ms", "latency_p99_ms", "latency_max_ms")
BATCHES = ("1", "8", "64", "256")
# When a figure agrees with its reference (ratio figure / reference):
TOLERANCE = {
    # the training clock is read after synchronize around the same region the events bracket: never below them, and
    # above only by the synchronize calls and the host's few statements (milliseconds against epochs of a second or more)
    "training_clock": (0.999, 1.02),
    # an item's clock adds the host's copy of the answer and two synchronize calls to the events' span: ~10-50 us on ~0.3 ms
    "inference_latency": (0.999, 1.5),
    # NVML's counter and its power readings (averaged by the driver over up to a second) over the same epochs
    "energy": (0.9, 1.1),
    # a training step cannot do more arithmetic a second than the card's best large matrix product
    "utilization": (0.0, 1.0),
    # the card's measured matrix product against its datasheet's dense peak: above it, the row does not describe this card
    "peak": (0.0, 1.05),
}


def now() -> str:
    return dt.datetime.now(dt.UTC).isoformat(timespec="seconds")


def read_json(path: Path) -> dict[str, Any] | None:
    try:
        doc = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return None
    return doc if isinstance(doc, dict) else None


def with_reasons(values: dict[str, Any], reason_of) -> dict[str, Any]:
    """``values`` with ``reasons``: for each null value, why (``reason_of(key)``)."""
    return {**values, "reasons": {k: reason_of(k) for k, v in values.items() if v is None}}


def ratio(a: float | None, b: float | None) -> float | None:
    return a / b if a is not None and b else None


def within(value: float | None, kind: str) -> bool | None:
    low, high = TOLERANCE[kind]
    return None if value is None else low <= value <= high


def on_gpu(device: str | None) -> bool:
    return bool(device) and str(device).startswith("cuda")


def no_gpu(device: str | None) -> str:
    return f"no GPU: the run trained on {device}" if device else "no GPU figure: the run has no run.json"


# ---------------------------------------------------------------- pipeline logs
RULE_ERROR = re.compile(r"^Error in rule (\S+):\n((?:\s+\S.*\n?)*)", re.M)


def failed_rules(text: str) -> list[tuple[str, str | None]]:
    """(rule, its stage log relative to the pipeline's folder) of each job Snakemake says failed."""
    out = []
    for m in RULE_ERROR.finditer(text):
        log = re.search(r"^\s+log: (\S+)", m.group(2), re.M)
        out.append((m.group(1), log.group(1) if log else None))
    return list(dict.fromkeys(out))


def error_line(path: Path) -> str | None:
    """The last line of a stage log that says what went wrong."""
    try:
        lines = [line.strip() for line in path.read_text(encoding="utf-8", errors="backslashreplace").splitlines() if line.strip()]
    except OSError:
        return None
    hit = next((line for line in reversed(lines) if re.search(r"error|failed|exception", line, re.I)), lines[-1] if lines else None)
    return hit[:300] if hit else None


# ---------------------------------------------------------------- the context
class Context:
    def __init__(self, out: Path, doc: dict[str, Any], mode: str):
        self.out, self.doc, self.mode = out, doc, mode
        self.steps: dict[str, Any] = doc.get("steps", {})
        self.runs = out / "pipeline" / "results" / "runs"
        self.files = out / "steps"
        self.probe = read_json(self.files / "probe.json")

    def run_dir(self, run: str) -> Path:
        return self.runs / run / "seed0"

    def step_reason(self, name: str) -> str:
        s = self.steps.get(name)
        if s is None:
            return f"step {name} has not run in this folder (bash bench/gpu_check.sh --out DIR --steps {name})"
        if s["status"] == "ok":
            return f"step {name} ran, and did not give it"
        return f"step {name} {s['status']}" + (f": {s['reason']}" if s.get("reason") else "") + (f" (log {s['log']})" if s.get("log") else "")


# ---------------------------------------------------------------- the machine
def machine(c: Context) -> dict[str, Any]:
    p = c.probe
    if p is None:
        return with_reasons({"gpu": None, "driver": None, "cuda": None, "torch": None, "peak_row": None}, lambda k: c.step_reason("probe"))
    torch_dev = (p["torch"]["devices"] or [None])[0]
    nvml_dev = (p["nvml"]["devices"] or [None])[0]
    gpu = None
    if torch_dev is not None:
        gpu = {
            "name": torch_dev["name"],
            "nvml_name": nvml_dev["name"] if nvml_dev else None,
            "compute_capability": torch_dev["compute_capability"],
            "multiprocessors": torch_dev["multiprocessors"],
            "memory_gib": torch_dev["memory_gib"],
            "power_limit_w": nvml_dev["power_limit_w"] if nvml_dev else None,
            "energy_counter": nvml_dev["energy_counter"] if nvml_dev else None,
            "nvml_status": p["nvml"]["status"],
            "devices": len(p["torch"]["devices"]),
        }
    row = p["peaks"].get(torch_dev["name"]) if torch_dev else None
    values = {
        "gpu": gpu,
        "driver": p["nvml"].get("driver"),
        "driver_cuda": p["nvml"].get("driver_cuda"),
        "cuda": p["torch"]["cuda"],
        "cudnn": p["torch"]["cudnn"],
        "torch": {"version": p["torch"]["version"], "cuda": p["torch"]["cuda"], "path": p["torch"].get("path"), "origin": p["torch"].get("origin")},
        "peak_row": row if row and row.get("device") else None,
        "cpu_model": p["cpu_model"],
        "cpu_count": p["cpu_count"],
        "platform": p["platform"],
        "memory_gib": p.get("memory_gib"),
        "python": p["python"],
        "onnxruntime_providers": p.get("onnxruntime_providers"),
        "packages": p["packages"],
        "missing_packages": p.get("requirements", {}).get("missing"),
        "missing_optional_packages": p.get("requirements", {}).get("missing_optional"),
    }

    def why(key: str) -> str:
        if gpu is None and key in ("gpu", "peak_row", "driver", "driver_cuda", "cuda", "cudnn"):
            return f"no GPU: {p['torch'].get('reason', 'torch sees no CUDA device')}; {p['nvml']['status']}"
        if key == "peak_row":
            return (row or {}).get("reason", "no row")
        return "not reported by the probe"

    return with_reasons(values, why)


def commit(c: Context) -> dict[str, Any]:
    """The checkout's commit where it is a git clone, beside the bundle's (which the probe's folder may lack)."""
    from dawnpipe.runinfo import git_state

    state = git_state(gpu_bundle.ROOT)
    bundle = ((c.steps.get("install") or {}).get("bundle")) or {}
    values = {
        "commit": state.get("commit"),
        "dirty": state.get("dirty"),
        "bundle_commit": bundle.get("commit"),
        "bundle_dirty": bundle.get("dirty"),
    }
    values["same_as_bundle"] = values["commit"] == values["bundle_commit"] if values["commit"] and values["bundle_commit"] else None
    return with_reasons(
        values,
        lambda k: "this checkout is not a git clone" if k in ("commit", "dirty") else "no bundle used (or it has no bundle.json)",
    )


# ---------------------------------------------------------------- training
def epochs_from_tsv(path: Path) -> list[float]:
    """Training-clock seconds of each epoch from a DAWNBench TSV (cumulative hours)."""
    try:
        with open(path, encoding="utf-8") as f:
            hours = [float(r["hours"]) for r in csv.DictReader(f, delimiter="\t")]
    except (OSError, ValueError, KeyError):
        return []
    return [(h - before) * 3600.0 for h, before in zip(hours, [0.0, *hours[:-1]])]


def run_precision(info: dict[str, Any] | None, util: dict[str, Any] | None) -> str | None:
    if util and util.get("precision"):
        return util["precision"]
    if (info or {}).get("environment", {}).get("precision"):  # what the run computed in (an entry's auto, resolved)
        return info["environment"]["precision"]
    entry = (info or {}).get("settings", {}).get("entry", {})
    return entry.get("hyperparameters", {}).get("precision") or entry.get("program", {}).get("precision")


def training(c: Context, run: str) -> dict[str, Any]:
    d, step = c.run_dir(run), RUN_STEP[run]
    info, tta, util = read_json(d / "run.json"), read_json(d / "time_to_accuracy.json"), read_json(d / "utilization.json")
    partial = not (d / "train.tsv").is_file()
    seconds = epochs_from_tsv(c.out / "pipeline" / "results" / ".work" / run / "seed0" / "train.tsv" if partial else d / "train.tsv")
    env = (info or {}).get("environment", {})
    result = (info or {}).get("result", {})
    device = env.get("device") or ("cpu" if run == "fastnet-cpu" and seconds else None)
    rates = [e["items_per_second"] for e in (util or {}).get("epochs", []) if e.get("items_per_second") is not None]
    reached = tta.get("reached") if tta else None
    values = {
        "entry": run,
        "variant": VARIANT.get(run),
        "step": (c.steps.get(step) or {}).get("status"),
        "device": device,
        "gpu": (env.get("gpus") or [None])[0] if on_gpu(device) else None,
        "precision": run_precision(info, util),
        "tf32_allowed": env.get("tf32_allowed"),
        "threads": (info or {}).get("threads_per_process"),
        "threshold": (info or {}).get("threshold"),
        "demo_threshold": (info or {}).get("demo_threshold"),
        "train_items": result.get("train_items"),
        "reached": reached,
        "time_to_accuracy_s": tta["time_to_accuracy_hours"] * 3600.0 if tta and reached else None,
        "epochs_to_accuracy": tta["epochs_to_accuracy"] if tta and reached else None,
        "epochs_run": len(seconds) if seconds else None,
        "epoch_seconds": seconds,
        "epoch_seconds_median": statistics.median(seconds) if seconds else None,
        "epoch_seconds_after_first": statistics.median(seconds[1:]) if len(seconds) > 1 else None,  # the first holds cuDNN's and the allocator's warm-up
        "items_per_second_median": statistics.median(rates) if rates else None,
        "wall_seconds": result["wall_hours"] * 3600.0 if result.get("wall_hours") is not None else None,
        "epochs_from": ("the run" if not partial else "the stopped run's per-epoch log so far") if seconds else None,
        "distributed": result.get("distributed"),
    }

    def why(key: str) -> str:
        if info is None and key not in ("epoch_seconds_median", "epoch_seconds_after_first", "epochs_run", "epochs_from", "device"):
            return c.step_reason(step) + ("; the run stopped before its end (run.json is written at the end)" if seconds else "")
        if key == "gpu":
            return no_gpu(device) if run != "fastnet-cpu" else "the CPU run (device: cpu)"
        if key in ("time_to_accuracy_s", "epochs_to_accuracy") and tta is not None and not reached:
            return f"did not reach {tta.get('threshold')}%: {tta.get('reason') or 'its epoch budget ended first'}"
        if key == "epoch_seconds_after_first":
            return "one epoch only" if seconds else c.step_reason(step)
        if key == "variant":
            return "an entry of config/entries as it is"
        if key == "tf32_allowed":
            return "run.json does not say (a program entry's run, or a run on the CPU)"
        if key == "items_per_second_median":
            return "no utilization.json" + ("" if run in RUN_STEP and step in ("ddp", "cpu") else f": {c.step_reason(step)}")
        return c.step_reason(step)

    return with_reasons(values, why)


# ---------------------------------------------------------------- inference
def inference(c: Context, run: str) -> dict[str, Any]:
    d = c.run_dir(run)
    backends = {}
    for path in sorted((d / "latency").glob("*.json")) if (d / "latency").is_dir() else []:
        r = read_json(path)
        if not r or "backend" not in r:
            continue
        tp = r.get("throughput_items_per_second") or {}
        backends[r["backend"]] = {
            "device": r["device"],
            "precision": r["precision"],
            "threads": r["threads"],
            "framework_version": r["framework_version"],
            "provider": (r.get("backend_notes") or {}).get("provider"),
            "items": r["items"],
            **{k: r[k] for k in LATENCY_KEYS},
            "accuracy": r["accuracy"],
            "meets_threshold": r["meets_threshold"],
            "throughput_items_per_second": {b: tp.get(b) for b in BATCHES} if tp else None,
            "export_check_max_abs_diff": (r.get("export_check") or {}).get("max_abs_diff"),
        }
    headline = read_json(d / "latency.json")
    failed = [{"backend": f["backend"], "reason": f["reason"]} for f in (headline or {}).get("backends_failed") or []]
    values = {"step": (c.steps.get(RUN_STEP[run]) or {}).get("status"), "backends": backends or None, "failed": failed}
    values["on_gpu"] = [b for b, r in backends.items() if on_gpu(r["device"])]
    return with_reasons(values, lambda k: c.step_reason(RUN_STEP[run]))


# ---------------------------------------------------------------- telemetry and utilization
GPU_TELEMETRY = {"power_w_mean": "power_w_mean", "memory_used_mb_max": "memory_used_mb_max", "gpu_utilization_pct_mean": "utilization_pct_mean"}
GPU_TELEMETRY |= {"sm_clock_mhz_mean": "sm_clock_mhz_mean", "temperature_c_max": "temperature_c_max"}


def telemetry(c: Context, run: str, trained: dict[str, Any]) -> dict[str, Any]:
    u = read_json(c.run_dir(run) / "utilization.json")
    tele = (u or {}).get("telemetry", {})
    gpu = (tele.get("gpus") or [{}])[0]
    energy = (u or {}).get("energy", {})
    values = {
        "gpu_device": gpu.get("device"),
        **{k: gpu.get(v) for k, v in GPU_TELEMETRY.items()},
        "energy_source": energy.get("source"),
        "energy_to_accuracy_j": energy.get("energy_to_accuracy_j"),
        "wall_energy_to_accuracy_j": energy.get("wall_energy_to_accuracy_j"),
        "run_energy_j": energy.get("run_j"),
        "inference_energy_per_item_j": (u or {}).get("inference_telemetry", {}).get("energy_per_item_j"),
        "samples": tele.get("samples"),
        "interval_s": tele.get("interval_s"),
    }
    device = trained.get("device")

    def why(key: str) -> str:
        if u is None:
            return c.step_reason(RUN_STEP[run])
        cpu = "" if on_gpu(device) else no_gpu(device) + "; "
        if key in ("energy_to_accuracy_j", "wall_energy_to_accuracy_j", "run_energy_j"):
            return cpu + (energy.get("reason") or "no energy meter")
        if key == "inference_energy_per_item_j":
            return cpu + "no samples with energy while answering"
        if key == "gpu_device" or key in GPU_TELEMETRY:
            return (cpu or "NVML gave no such samples: ") + str(tele.get("sources", {}).get("gpu", ""))
        return "not in utilization.json"

    return with_reasons(values, why)


def utilization(c: Context, run: str) -> dict[str, Any]:
    u = read_json(c.run_dir(run) / "utilization.json")
    peak, flops = (u or {}).get("peak", {}), (u or {}).get("flops", {})
    values = {
        "precision": (u or {}).get("precision"),
        "peak_device": peak.get("device"),
        "peak_method": peak.get("method"),
        "peak_tflops": peak.get("compute_tflops"),
        "peak_source": peak.get("source"),
        "flops_per_item": flops.get("flops_per_item"),
        "achieved_tflops_median": (u or {}).get("achieved_tflops_median"),
        "fraction_of_peak_median": (u or {}).get("fraction_of_peak_median"),
    }

    def why(key: str) -> str:
        if u is None:
            return c.step_reason(RUN_STEP[run])
        if key in ("peak_tflops", "fraction_of_peak_median", "peak_method"):
            return peak.get("source") or "no peak"
        if key in ("flops_per_item", "achieved_tflops_median"):
            return flops.get("reason") or "FLOPs not counted"
        return "not in utilization.json"

    return with_reasons(values, why)


# ---------------------------------------------------------------- comparisons
NCCL_VERSION = re.compile(r"NCCL version (\S+)")


def ddp(c: Context, dp: dict[str, Any], single: dict[str, Any]) -> dict[str, Any]:
    dist = dp.get("distributed") or {}
    device = dp.get("device")
    expected = "nccl" if on_gpu(device) else "gloo"
    log = c.out / "pipeline" / "results" / "logs" / "train" / "fastnet-ddp1" / "seed0.log"
    nccl = NCCL_VERSION.search(log.read_text(encoding="utf-8", errors="replace")) if log.is_file() else None
    values = {
        "what_it_exercises": "the launcher (torchrun), the process group and DDP's wrapping at world size 1; no communication between GPUs (one rank)",
        "device": device,
        "backend": dist.get("backend"),
        "expected_backend": expected if device else None,
        "launcher": dist.get("launcher"),
        "world_size": dist.get("world_size"),
        "nccl": (dist.get("backend") == "nccl") if on_gpu(device) else None,
        "nccl_version": nccl.group(1) if nccl else None,
        "data_parallel_path_taken": (dist.get("backend") == expected and dist.get("launcher") == "torchrun") if device else None,
        "time_to_accuracy_s": dp.get("time_to_accuracy_s"),
        "epoch_seconds_median": dp.get("epoch_seconds_median"),
        "single_process_epoch_seconds_median": single.get("epoch_seconds_median"),
        "ddp_over_single_epoch_time": ratio(dp.get("epoch_seconds_median"), single.get("epoch_seconds_median")),
    }

    def why(key: str) -> str:
        if key in ("nccl", "nccl_version") and device and not on_gpu(device):
            return f"no GPU: the rank ran on {device}, so gloo (NCCL is between GPUs)"
        if key == "nccl_version":
            return "the run's log has no 'NCCL version' line (NCCL_DEBUG=INFO prints it when NCCL starts)"
        if key in ("backend", "launcher", "world_size") and device:
            return "the data-parallel path was not taken: run.json's result.distributed says none"
        if key.startswith("single_process_"):
            return single["reasons"].get(key.removeprefix("single_process_"), "not measured")
        if key == "ddp_over_single_epoch_time":
            return single["reasons"].get("epoch_seconds_median") or dp["reasons"].get("epoch_seconds_median", "not measured")
        return dp["reasons"].get({"expected_backend": "device", "data_parallel_path_taken": "device"}.get(key, key)) or dp["reasons"].get(
            "device", "not measured"
        )

    return with_reasons(values, why)


def gpu_vs_cpu(gpu_run: dict[str, Any], cpu_run: dict[str, Any]) -> dict[str, Any]:
    gpu_ok = on_gpu(gpu_run.get("device"))
    # the GPU's first epoch holds its warm-up; the CPU's epochs are compared with the GPU's after it where there are
    gpu_epoch = gpu_run.get("epoch_seconds_after_first") or gpu_run.get("epoch_seconds_median")
    values = {
        "gpu": gpu_run.get("gpu"),
        "gpu_time_to_accuracy_s": gpu_run.get("time_to_accuracy_s") if gpu_ok else None,
        "cpu_time_to_accuracy_s": cpu_run.get("time_to_accuracy_s"),
        "cpu_over_gpu_time_to_accuracy": ratio(cpu_run.get("time_to_accuracy_s"), gpu_run.get("time_to_accuracy_s")) if gpu_ok else None,
        "gpu_epoch_seconds": gpu_epoch if gpu_ok else None,
        "cpu_epoch_seconds_median": cpu_run.get("epoch_seconds_median"),
        "cpu_epochs": cpu_run.get("epochs_run"),
        "cpu_over_gpu_epoch_time": ratio(cpu_run.get("epoch_seconds_median"), gpu_epoch) if gpu_ok else None,
        "cpu_threads": cpu_run.get("threads"),
    }

    def why(key: str) -> str:
        if not gpu_ok and (key.startswith("gpu") or "over_gpu" in key):
            return no_gpu(gpu_run.get("device")) + " (both runs on the CPU: no ratio)"
        if key == "cpu_time_to_accuracy_s" and cpu_run.get("epochs_from") and cpu_run.get("run_json") is None:
            return "the CPU run was cut at its time cap before the threshold: its seconds per epoch are measured, its time to accuracy is not"
        if key == "cpu_over_gpu_time_to_accuracy":
            return "no CPU time to accuracy: " + (cpu_run.get("reasons") or {}).get("time_to_accuracy_s", "not measured")
        source = cpu_run if key.startswith("cpu") else gpu_run
        return (source.get("reasons") or {}).get(key.replace("cpu_", "").replace("gpu_", ""), "not measured")

    return with_reasons(values, why)


def program(c: Context, trained: dict[str, Any], inferred: dict[str, Any]) -> dict[str, Any]:
    info = read_json(c.run_dir("torch-fmnist") / "run.json")
    prog = (info or {}).get("program") or {}
    providers = (c.probe or {}).get("onnxruntime_providers") or []
    scorer = "CUDAExecutionProvider" if "CUDAExecutionProvider" in providers else "CPUExecutionProvider" if providers else None
    backends = inferred.get("backends") or {}
    values = {
        "device": trained.get("device"),
        "precision": trained.get("precision"),
        "time_to_accuracy_s": trained.get("time_to_accuracy_s"),
        "epochs_to_accuracy": trained.get("epochs_to_accuracy"),
        "epoch_seconds_median": trained.get("epoch_seconds_median"),
        "model_format": prog.get("model_format"),
        "scored_by": f"ONNX Runtime, {scorer}" if scorer and prog.get("model_format") == "onnx" else None,
        "inference_devices": {b: r["device"] for b, r in backends.items()} or None,
        "excluded": prog.get("excluded"),
    }

    def why(key: str) -> str:
        if key == "scored_by":
            return "the run has no ONNX model, or the probe saw no ONNX Runtime" if info else c.step_reason("torch-fmnist")
        if key == "excluded":
            return "ranked: nothing excluded it"
        if key == "inference_devices":
            return inferred["reasons"].get("backends", "no inference result")
        return (trained.get("reasons") or {}).get(key) or c.step_reason("torch-fmnist")

    return with_reasons(values, why)


# ---------------------------------------------------------------- references
def gpu_step_reason(c: Context, name: str) -> str:
    if c.mode != "gpu":
        return "no GPU in a dry run: the reference times work on a GPU with CUDA events"
    return c.step_reason(name)


def peak_reference(c: Context) -> dict[str, Any]:
    p = read_json(c.files / "peak.json")
    precisions = {}
    for precision, r in ((p or {}).get("precisions") or {}).items():
        precisions[precision] = {
            "measured_tflops": r["tflops_best"],
            "measured_tflops_median": r["tflops_median"],
            "n": r["n"],
            "datasheet_tflops": r["datasheet_tflops"],
            "measured_over_datasheet": r["measured_over_datasheet"],
            "within": within(r["measured_over_datasheet"], "peak"),
        }
    values = {
        "device_name": (p or {}).get("device_name"),
        "datasheet_row": ((p or {}).get("datasheet") or {}).get("device"),
        "tf32_allowed": (p or {}).get("tf32_allowed"),
        "precisions": precisions or None,
        "tolerance": list(TOLERANCE["peak"]),
    }
    return with_reasons(values, lambda k: gpu_step_reason(c, "peak") if p is None else "peaks.yaml has no row for this card")


def utilization_reason(c: Context, key: str, u: dict[str, Any], measured: float | None) -> str:
    """Why a field of a run's utilization reference is null."""
    own = (u.get("reasons") or {}).get("achieved_tflops_median")
    if key == "achieved_tflops_median" or (key in ("achieved_over_matmul", "within") and own and measured is not None):
        return own or "not measured"
    if key in ("datasheet_tflops", "fraction_of_datasheet"):
        return (u.get("reasons") or {}).get("peak_tflops") or f"the run's peak is not a datasheet figure: {u.get('peak_source')}"
    if key == "precision":
        return (u.get("reasons") or {}).get("precision", "not measured")
    return f"no matrix product of the run's precision ({u.get('precision')}): " + gpu_step_reason(c, "peak")


def utilization_reference(c: Context, utils: dict[str, dict[str, Any]]) -> dict[str, Any]:
    p = read_json(c.files / "peak.json")
    rows = {}
    for run, u in utils.items():
        measured = (((p or {}).get("precisions") or {}).get(u.get("precision") or "") or {}).get("tflops_best")
        achieved = u.get("achieved_tflops_median")
        r = ratio(achieved, measured)
        rows[run] = {
            "precision": u.get("precision"),
            "achieved_tflops_median": achieved,
            "matmul_tflops": measured,
            "achieved_over_matmul": r,
            "datasheet_tflops": u.get("peak_tflops") if u.get("peak_method") == "datasheet" else None,
            "fraction_of_datasheet": u.get("fraction_of_peak_median") if u.get("peak_method") == "datasheet" else None,
            "within": within(r, "utilization"),
        }
        rows[run] = with_reasons(rows[run], lambda k, u=u, measured=measured: utilization_reason(c, k, u, measured))
    return {"runs": rows, "tolerance": list(TOLERANCE["utilization"])}


def clock_reference(c: Context) -> dict[str, Any]:
    r = read_json(c.files / "clock" / "clock.json")
    values = {
        "entry": (r or {}).get("entry"),
        "device": (r or {}).get("device"),
        "epochs": (r or {}).get("epochs"),
        "clock_total_s": (r or {}).get("clock_total_s"),
        "events_total_s": (r or {}).get("events_total_s"),
        "tsv_total_s": (r or {}).get("tsv_total_s"),
        "clock_over_events": (r or {}).get("clock_over_events"),
        "within": within((r or {}).get("clock_over_events"), "training_clock"),
        "tolerance": list(TOLERANCE["training_clock"]),
    }
    return with_reasons(values, lambda k: gpu_step_reason(c, "clock"))


def latency_reference(c: Context) -> dict[str, Any]:
    r = read_json(c.files / "latency.json")
    backends = {}
    for name, b in ((r or {}).get("backends") or {}).items():
        backends[name] = {
            **b,
            "within": within(b.get("clock_over_events"), "inference_latency"),
            "stage_within": within(b.get("stage_over_events"), "inference_latency"),
        }
    values = {"items": (r or {}).get("items"), "backends": backends or None, "tolerance": list(TOLERANCE["inference_latency"])}
    return with_reasons(values, lambda k: gpu_step_reason(c, "latency"))


def energy_reference(c: Context, run: str, trained: dict[str, Any], energy_counter: bool | None) -> dict[str, Any]:
    u = read_json(c.run_dir(run) / "utilization.json")
    e = (u or {}).get("energy") or {}
    upto = e.get("threshold_epoch")
    epochs = [x for x in (u or {}).get("epochs", []) if upto is not None and x["epoch"] <= upto]
    power_time = None
    if epochs and all(x.get("mean_power_w") is not None for x in epochs):
        power_time = sum(x["mean_power_w"] * x["train_seconds"] for x in epochs)
    figure = e.get("energy_to_accuracy_j")
    r = ratio(figure, power_time)
    values = {
        "energy_to_accuracy_j": figure,
        "source": e.get("source"),
        "mean_power_times_time_j": power_time,
        "counter_over_power_time": r if energy_counter else None,
        "within": within(r, "energy") if energy_counter else None,
        "tolerance": list(TOLERANCE["energy"]),
    }

    def why(key: str) -> str:
        if u is None:
            return c.step_reason(RUN_STEP[run])
        if not on_gpu(trained.get("device")):
            return no_gpu(trained.get("device"))
        if key in ("counter_over_power_time", "within") and not energy_counter:
            return "the GPU has no energy counter: the energy figure is itself power integrated over time, no independent reference"
        if key == "mean_power_times_time_j":
            return "no power samples in every epoch up to the threshold"
        return e.get("reason") or "not measured"

    return with_reasons(values, why)


# ---------------------------------------------------------------- the whole
def summarize(out: Path, doc: dict[str, Any], mode: str) -> dict[str, Any]:
    c = Context(out, doc, mode)
    m = machine(c)
    trained = {run: training(c, run) for run in RUN_STEP}
    inferred = {run: inference(c, run) for run in INFERENCE_RUNS}
    utils = {run: utilization(c, run) for run in INFERENCE_RUNS}
    counter = (m.get("gpu") or {}).get("energy_counter")
    return {
        "name": "gpu_check",
        "mode": mode,
        "started": doc.get("started"),
        "updated": doc.get("updated") or now(),
        "invocations": doc.get("invocations", []),
        "commit": commit(c),
        "machine": m,
        "steps": doc.get("steps", {}),
        "training": trained,
        "inference": inferred,
        "telemetry": {run: telemetry(c, run, trained[run]) for run in INFERENCE_RUNS},
        "utilization": utils,
        "ddp": ddp(c, trained["fastnet-ddp1"], trained["fastnet"]),
        "gpu_vs_cpu": gpu_vs_cpu(trained["fastnet"], {**trained["fastnet-cpu"], "run_json": read_json(c.run_dir("fastnet-cpu") / "run.json")}),
        "program": program(c, trained["torch-fmnist"], inferred["torch-fmnist"]),
        "references": {
            "peak": peak_reference(c),
            "utilization": utilization_reference(c, utils),
            "training_clock": clock_reference(c),
            "inference_latency": latency_reference(c),
            "energy": {run: energy_reference(c, run, trained[run], counter) for run in INFERENCE_RUNS},
        },
    }


# ---------------------------------------------------------------- the text
def _n(x: float | None, fmt: str = "{:.1f}", none: str = "-") -> str:
    return fmt.format(x) if x is not None else none


def text(s: dict[str, Any]) -> str:
    """The summary printed last (and gpu_check.txt)."""
    m = s["machine"]
    counts = {k: sum(1 for st in s["steps"].values() if st["status"] == k) for k in ("ok", "failed", "timeout", "skipped", "interrupted")}
    gpu = (m.get("gpu") or {}).get("name") or "no GPU"
    torch = m.get("torch") or {}
    lines = [
        f"gpu check ({s['mode']}) on {gpu}, driver {m.get('driver') or '-'}, torch {torch.get('version', '-')} (CUDA {torch.get('cuda') or '-'}, "
        f"{torch.get('origin') or '-'}), commit {str(s['commit'].get('commit') or s['commit'].get('bundle_commit'))[:10]}: "
        + ", ".join(f"{v} {k}" for k, v in counts.items() if v),
        "",
        f"{'training':<16}{'device':<9}{'precision':<10}{'to threshold':>14}{'epochs':>8}{'s/epoch':>9}{'items/s':>10}",
    ]
    for run, t in s["training"].items():
        lines.append(
            f"{run:<16}{str(t['device'] or '-'):<9}{str(t['precision'] or '-'):<10}{_n(t['time_to_accuracy_s'], '{:.1f} s'):>14}"
            f"{_n(t['epochs_to_accuracy'], '{:.0f}'):>8}{_n(t['epoch_seconds_median'], '{:.2f}'):>9}{_n(t['items_per_second_median'], '{:,.0f}'):>10}"
        )
    lines += ["", f"{'inference':<33}{'device':<9}{'ms/item':>9}{'p99':>9}   items/s at batch 1 / 8 / 64 / 256"]
    for run, inf in s["inference"].items():
        for backend, r in (inf["backends"] or {}).items():
            tp = r["throughput_items_per_second"] or {}
            lines.append(
                f"{run + ' ' + backend:<33}{r['device']:<9}{r['latency_mean_ms']:>9.3f}{r['latency_p99_ms']:>9.3f}   "
                + " / ".join(_n(tp.get(k), "{:,.0f}") for k in BATCHES)
            )
        lines += [f"{run + ' ' + f['backend']:<33}failed: {f['reason'][:90]}" for f in inf["failed"]]
    lines += ["", f"{'telemetry':<16}{'power W':>9}{'mem MB':>9}{'energy to thr. J':>18}   {'achieved TFLOP/s':>17}{'of peak':>9}"]
    for run in s["telemetry"]:
        t, u = s["telemetry"][run], s["utilization"][run]
        lines.append(
            f"{run:<16}{_n(t['power_w_mean']):>9}{_n(t['memory_used_mb_max'], '{:.0f}'):>9}{_n(t['energy_to_accuracy_j']):>18}   "
            f"{_n(u['achieved_tflops_median'], '{:.3f}'):>17}{_n(u['fraction_of_peak_median'], '{:.2%}'):>9}"
        )
    d, g, refs = s["ddp"], s["gpu_vs_cpu"], s["references"]
    lines += [
        "",
        f"ddp: backend {d['backend']} (expected {d['expected_backend']}) via {d['launcher']}, world size {d['world_size']}: "
        f"{_n(d['epoch_seconds_median'], '{:.2f}')} s/epoch against {_n(d['single_process_epoch_seconds_median'], '{:.2f}')} in one process",
        f"gpu vs cpu (fastnet): per epoch {_n(g['cpu_over_gpu_epoch_time'], '{:.1f}x')}"
        + (f" ({g['reasons'].get('cpu_over_gpu_epoch_time')})" if g["cpu_over_gpu_epoch_time"] is None else "")
        + f"; to threshold {_n(g['cpu_over_gpu_time_to_accuracy'], '{:.1f}x')}",
        "",
        "references (figure / reference, within tolerance):",
    ]
    for precision, r in (refs["peak"]["precisions"] or {}).items():
        lines.append(
            f"  matmul {precision}: {_n(r['measured_tflops'])} TFLOP/s measured, {_n(r['datasheet_tflops'])} datasheet ({_n(r['measured_over_datasheet'], '{:.2f}')}, {r['within']})"
        )
    if not refs["peak"]["precisions"]:
        lines.append(f"  matmul: {refs['peak']['reasons'].get('precisions')}")
    for run, r in refs["utilization"]["runs"].items():
        lines.append(f"  utilization {run}: achieved / matmul {_n(r['achieved_over_matmul'], '{:.3f}')} ({r['within']})")
    tc = refs["training_clock"]
    lines.append(
        f"  training clock / CUDA events: {_n(tc['clock_over_events'], '{:.4f}')} ({tc['within']})"
        + (f" ({tc['reasons'].get('clock_over_events')})" if tc["clock_over_events"] is None else "")
    )
    il = refs["inference_latency"]
    for name, b in (il["backends"] or {}).items():
        lines.append(
            f"  latency {name} / CUDA events: {_n(b['clock_over_events'], '{:.3f}')} ({b['within']}); the stage's: {_n(b['stage_over_events'], '{:.3f}')}"
        )
    if not il["backends"]:
        lines.append(f"  latency / CUDA events: {il['reasons'].get('backends')}")
    for run, e in refs["energy"].items():
        lines.append(f"  energy {run}: counter / (mean power x time) {_n(e['counter_over_power_time'], '{:.3f}')} ({e['within']})")
    for status in ("failed", "timeout", "skipped", "interrupted"):
        listed = [(n, st) for n, st in s["steps"].items() if st["status"] == status]
        if listed:
            lines += ["", f"{status}:"] + [f"  {n}: {st.get('reason', '')[:200]}" for n, st in listed]
    return "\n".join(lines) + "\n"
