"""Telemetry (docs/rules.md#analysis-metrics and
docs/rules.md#energy-to-accuracy-shown-where-measured): the sampler, energy
integration, RAPL counters, peaks.

The CPU path (psutil) runs for real on this machine. NVML and RAPL do not
exist here (no GPU, no /sys/class/powercap), so their contracts are tested
against stand-ins named as such: a module imitating pynvml's functions and a
directory laid out like the powercap sysfs tree.
"""

from __future__ import annotations

import json
import math
import threading
import time

import numpy as np
import pandas as pd
import pytest
from conftest import run_cli, train_command
from nvml_stand_in import FakeGpu, NvmlStandIn

from dawnpipe.telemetry import energy as en
from dawnpipe.telemetry import mark_training_clock, rapl, sampling
from dawnpipe.telemetry.nvml import NvmlGpus
from dawnpipe.telemetry.peaks import device_peak, gpu_peak, peak_table, probe_cpu
from dawnpipe.telemetry.sampler import COLUMNS, Sampler


def _telemetry_threads():
    return [t for t in threading.enumerate() if t.name == "dawnpipe-telemetry" and t.is_alive()]


def _until(done, *, busy: bool = False, guard_s: float = 60.0) -> None:
    """Wait (or, ``busy``, keep a core busy) until ``done()``: a number of
    samples, not a span of time, so that a loaded machine, which ticks late,
    is waited for rather than failed. The guard is a hang guard."""
    end = time.perf_counter() + guard_s
    while not done():
        assert time.perf_counter() < end, f"not done after {guard_s:g} s: hung"
        if busy:
            sum(i * i for i in range(200))
        else:
            time.sleep(0.01)


# ------------------------------------------------------------------ CPU path, real
def test_sampler_cpu_path_for_real(tmp_path):
    out = tmp_path / "telemetry.parquet"
    with sampling(out, 0.05, powercap=tmp_path / "no-powercap", nvml=NvmlStandIn([], library_present=False)) as s:
        _until(lambda: s.ticks >= 3, busy=True)
    frame = pd.read_parquet(out)
    assert list(frame.columns) == COLUMNS
    proc = frame[frame["kind"] == "process"]
    assert len(proc) == s.ticks >= 3
    assert proc["t_s"].is_monotonic_increasing and proc["t_s"].iloc[0] >= 0
    # the process was busy the whole time: psutil saw CPU time in at least one interval
    assert proc["utilization_pct"].max() > 0
    assert (proc["memory_used_mb"] > 10).all()  # a Python process with pandas loaded is tens of MB
    summary = s.summary()
    assert summary["outcome"] == "completed" and summary["error"] is None
    assert summary["energy_source"] == "none"  # psutil measures no energy
    assert "absent" in summary["sources"]["rapl"] and "NVML unavailable" in summary["sources"]["gpu"]
    assert not _telemetry_threads()


def test_training_clock_origin_is_placed_on_the_samples(tmp_path):
    with sampling(tmp_path / "t.parquet", 0.05, powercap=tmp_path / "none", nvml=NvmlStandIn([])) as s:
        time.sleep(0.1)
        origin = time.perf_counter()
        mark_training_clock(origin)
    assert s.summary()["training_clock_origin_s"] == pytest.approx(origin - s.t0)
    assert s.training_clock_origin_s >= 0.1


def test_mark_training_clock_without_a_sampler_is_a_no_op(tmp_path):
    """Marked when nothing samples (before any sampler, and after one has
    stopped), the clock origin lands on no sampler: not on the finished one,
    whose summary was already taken, nor on the next one to start."""
    mark_training_clock(time.perf_counter())
    with sampling(tmp_path / "a.parquet", 0.05, powercap=tmp_path / "none", nvml=NvmlStandIn([])) as first:
        time.sleep(0.06)
    mark_training_clock(time.perf_counter())
    assert first.training_clock_origin_s is None and first.summary()["training_clock_origin_s"] is None
    with sampling(tmp_path / "b.parquet", 0.05, powercap=tmp_path / "none", nvml=NvmlStandIn([])) as second:
        time.sleep(0.06)
    assert second.summary()["training_clock_origin_s"] is None


def test_sampler_stops_and_keeps_a_partial_file_when_the_run_raises(tmp_path):
    out, partial = tmp_path / "telemetry.parquet", tmp_path / "work" / "telemetry.partial.parquet"
    with pytest.raises(RuntimeError, match="diverged"):
        with sampling(out, 0.02, partial_path=partial, powercap=tmp_path / "none", nvml=NvmlStandIn([])) as s:
            _until(lambda: s.ticks >= 2)
            raise RuntimeError("training diverged")
    assert not _telemetry_threads()
    assert s.outcome == "failed"
    assert not out.exists()  # never a file that looks finished
    assert len(pd.read_parquet(partial)) == s.ticks >= 2


def test_interval_zero_samples_nothing_but_writes_the_declared_file(tmp_path):
    out = tmp_path / "t.parquet"
    with sampling(out, 0) as s:
        pass
    assert s is None
    frame = pd.read_parquet(out)
    assert frame.empty and list(frame.columns) == COLUMNS


def test_an_error_inside_a_tick_ends_sampling_not_the_run(tmp_path):
    class Broken(NvmlStandIn):
        def nvmlDeviceGetUtilizationRates(self, h):
            raise ValueError("driver went away")

    with sampling(tmp_path / "t.parquet", 0.02, powercap=tmp_path / "none", nvml=Broken([FakeGpu("Tesla T4", "GPU-a")])) as s:
        _until(lambda: s.error is not None)
    assert "ValueError: driver went away" in s.summary()["error"]
    assert not _telemetry_threads()


def test_train_cli_failure_leaves_no_telemetry_output(tmp_path):
    """The real train stage failing inside the sampling block (prepared data
    whose manifest lists no splits): exit 1, no declared telemetry file, the
    samples in the work dir."""
    run, data = tmp_path / "run", tmp_path / "prepared"
    data.mkdir()
    (data / "manifest.json").write_text(json.dumps({"task": "fashion-mnist", "splits": {}}))
    proc = run_cli(*train_command("config/entries/fastnet.yaml", data, run, work_dir=run / ".work", telemetry_interval="0.05"))
    assert proc.returncode == 1, proc.stderr
    assert "no split 'train'" in proc.stderr and "Traceback" not in proc.stderr
    assert not (run / "telemetry.parquet").exists()
    assert (run / ".work" / "telemetry.partial.parquet").is_file()


# ------------------------------------------------------------ NVML, stand-in
def test_sampler_contract_with_nvml_stand_in(tmp_path, monkeypatch):
    """Stand-in for pynvml (no GPU here): units, per-device rows, shutdown."""
    monkeypatch.delenv("CUDA_VISIBLE_DEVICES", raising=False)
    nvml = NvmlStandIn([FakeGpu("NVIDIA A100-SXM4-40GB", "GPU-aaa"), FakeGpu("NVIDIA A100-SXM4-40GB", "GPU-bbb", power_mw=None)])
    out = tmp_path / "t.parquet"
    with sampling(out, 0.02, nvml=nvml, powercap=tmp_path / "none") as s:
        _until(lambda: s.ticks >= 3)
    assert nvml.initialised == 1 and nvml.shutdowns == 1
    frame = pd.read_parquet(out)
    gpus = frame[frame["kind"] == "gpu"]
    assert sorted(gpus["device"].unique()) == ["gpu0", "gpu1"]
    g0 = gpus[gpus["device"] == "gpu0"]
    assert (g0["power_w"] == 250.0).all()  # 250,000 mW
    assert (g0["utilization_pct"] == 87).all() and (g0["memory_utilization_pct"] == 40).all()
    assert (g0["memory_used_mb"] == 3 * 1024).all()
    assert (g0["sm_clock_mhz"] == 1410).all() and (g0["temperature_c"] == 66).all()
    # the counter is read once at open (reference), then once per sample: +0.5 J each
    assert g0["energy_j"].tolist() == pytest.approx([0.5 * (i + 1) for i in range(len(g0))])
    g1 = gpus[gpus["device"] == "gpu1"]
    assert g1["power_w"].isna().all()  # "Not Supported" becomes empty, not a failure
    assert s.summary()["energy_source"] == "NVML"
    assert "2 device(s)" in s.summary()["sources"]["gpu"]
    m = en.meter(frame)
    assert m.source == "NVML" and m.devices == ("gpu0", "gpu1")


@pytest.mark.parametrize("visible, expected", [("1", ["gpu1"]), ("GPU-bbb,GPU-aaa", ["gpu0", "gpu1"]), ("", []), ("0,7", ["gpu0"])])
def test_nvml_stand_in_respects_cuda_visible_devices(visible, expected):
    """Stand-in for pynvml: only the devices the run can see are sampled."""
    nvml = NvmlStandIn([FakeGpu("Tesla T4", "GPU-aaa"), FakeGpu("Tesla T4", "GPU-bbb")])
    gpus = NvmlGpus(nvml, visible)
    assert sorted(g.device for g in gpus.gpus) == expected
    gpus.close()


def test_nvml_stand_in_without_library_reports_why():
    gpus = NvmlGpus(NvmlStandIn([], library_present=False), None)
    assert gpus.gpus == [] and gpus.status == "NVML unavailable: NVML Shared Library Not Found"


def test_real_pynvml_on_this_machine_reports_unavailable_instead_of_failing():
    import pynvml  # noqa: F401  (nvidia-ml-py is pinned: present on every machine, GPU or not)

    gpus = NvmlGpus(None, None)
    assert gpus.status.startswith(("NVML unavailable", "NVML: "))  # no driver here; on a GPU machine: "NVML: n device(s)"
    gpus.close()


# ------------------------------------------------------------ RAPL, stand-in sysfs
def _zone(root, name, dirname, energy, max_range=1000_000_000):
    d = root / dirname
    d.mkdir(parents=True)
    (d / "name").write_text(name + "\n")
    (d / "energy_uj").write_text(f"{energy}\n")
    (d / "max_energy_range_uj").write_text(f"{max_range}\n")
    return d


def test_rapl_discovery_on_a_stand_in_powercap_tree(tmp_path):
    """A directory laid out like /sys/class/powercap (absent on this machine)."""
    _zone(tmp_path, "package-0", "intel-rapl:0", 5)
    _zone(tmp_path, "core", "intel-rapl:0:0", 5)  # inside the package: not added again
    _zone(tmp_path, "dram", "intel-rapl:0:1", 5)  # outside the package domain: added
    _zone(tmp_path, "psys", "intel-rapl:1", 5)  # contains the packages: skipped
    zones, status = rapl.discover(tmp_path)
    assert [z.path.name for z in zones] == ["intel-rapl:0", "intel-rapl:0:1"]
    assert "package-0" in status and "dram" in status


def test_rapl_counter_wrap_around_on_a_stand_in_zone(tmp_path):
    d = _zone(tmp_path, "package-0", "intel-rapl:0", 999_000_000, max_range=1_000_000_000)
    (zone,), _ = rapl.discover(tmp_path)
    (d / "energy_uj").write_text("999_500_000".replace("_", ""))
    assert zone.read() == pytest.approx(0.5)
    (d / "energy_uj").write_text("300000")  # wrapped: 0.5 J to the top, then 0.3 J
    assert zone.read() == pytest.approx(1.3)
    (d / "energy_uj").write_text("2300000")
    assert zone.read() == pytest.approx(3.3)


def test_unwrap_delta():
    assert rapl.unwrap_delta(10, 25, 100) == 15
    assert rapl.unwrap_delta(90, 5, 100) == 15
    assert rapl.unwrap_delta(7, 7, 100) == 0


def test_rapl_absent_on_this_machine_is_reported(tmp_path):
    zones, status = rapl.discover(tmp_path / "powercap")
    assert zones == [] and "absent" in status


def test_sampler_reads_rapl_from_a_stand_in_tree(tmp_path):
    d = _zone(tmp_path, "package-0", "intel-rapl:0", 0)
    s = Sampler(tmp_path / "t.parquet", 10.0, powercap=tmp_path, nvml=NvmlStandIn([])).start()  # one tick at start
    (d / "energy_uj").write_text("40000000")  # 40 J later
    s.stop()  # the last tick
    frame = s.frame()
    r = frame[frame["kind"] == "rapl"]
    assert r["energy_j"].tolist() == [0.0, 40.0]
    assert s.summary()["energy_source"] == "RAPL"


# ------------------------------------------------------------ energy integration
def constant_trace(watts: float, seconds: float, step: float, device="gpu0", kind="gpu", counter=False) -> pd.DataFrame:
    t = np.arange(0.0, seconds + 1e-9, step)
    return pd.DataFrame({"t_s": t, "device": device, "kind": kind, "power_w": np.nan if counter else watts, "energy_j": watts * t if counter else np.nan})


def test_energy_of_a_constant_power_trace():
    m = en.meter(constant_trace(150.0, 100.0, 0.5))
    assert m.total == pytest.approx(15_000.0)
    assert m.between(10.0, 20.0) == pytest.approx(1_500.0)
    assert m.between(10.25, 10.75) == pytest.approx(75.0)  # between samples: interpolated
    assert m.between(-1.0, 5.0) is None and m.between(90.0, 101.0) is None  # never extrapolated


def test_gpu_counter_and_rapl_add_up():
    both = pd.concat([constant_trace(200.0, 10.0, 1.0, counter=True), constant_trace(50.0, 10.0, 1.0, "rapl:intel-rapl:0", "rapl", counter=True)])
    m = en.meter(both)
    assert m.source == "NVML+RAPL" and m.total == pytest.approx(2_500.0)


def test_process_samples_alone_measure_no_energy():
    frame = pd.DataFrame({"t_s": [0.0, 1.0], "device": "process", "kind": "process", "power_w": np.nan, "energy_j": np.nan})
    assert en.meter(frame) is None


def _log(epochs: list[tuple[float, float, float, float]]) -> pd.DataFrame:
    """(epoch_train_seconds, eval_seconds, checkpoint-ish gap, metric) -> a log like the trainers'."""
    rows, wall, clock = [], 0.0, 0.0
    for i, (train, ev, gap, metric) in enumerate(epochs, start=1):
        wall += train + ev
        clock += train
        rows.append(
            {
                "epoch": i,
                "hours": clock / 3600,
                "wall_hours": wall / 3600,
                "eval_seconds": ev,
                "epoch_train_seconds": train,
                "top1Accuracy": metric,
                "items_per_second": 1000.0,
            }
        )
        wall += gap
    return pd.DataFrame(rows)


def test_energy_to_accuracy_counts_training_spans_only():
    # 100 W for 200 s; training starts 5 s into the samples; epochs of 20 s with 4 s evaluations and 1 s gaps
    m = en.meter(constant_trace(100.0, 200.0, 1.0))
    log = _log([(20, 4, 1, 80.0), (20, 4, 1, 91.0), (20, 4, 1, 95.0)])
    e = en.energy_to_accuracy(m, log, origin_s=5.0, threshold_row=1)
    assert e["energy_to_accuracy_j"] == pytest.approx(100.0 * 40)  # two epochs of 20 s training
    assert e["wall_energy_to_accuracy_j"] == pytest.approx(100.0 * (20 + 4 + 1 + 20 + 4))  # to the end of epoch 2's evaluation
    assert en.epoch_energy(m, log, 5.0) == pytest.approx([2000.0, 2000.0, 2000.0])


def test_energy_to_accuracy_outside_the_samples_is_not_measured():
    m = en.meter(constant_trace(100.0, 30.0, 1.0))
    log = _log([(20, 4, 1, 80.0), (20, 4, 1, 91.0)])
    assert en.energy_to_accuracy(m, log, origin_s=5.0, threshold_row=1)["energy_to_accuracy_j"] is None


def test_integrate_power_trapezoids():
    assert en.integrate_power([0, 1, 3], [10, 20, 20]).tolist() == [0.0, 15.0, 55.0]


# ------------------------------------------------------------ peaks
def test_peak_table_rows_are_complete_and_sourced():
    for name, row in peak_table().items():
        assert row["source"] and row["fp32"] > 0 and row["memory_gbps"] > 0, name
        for p in ("fp16", "bf16", "tf32"):
            assert row[p] is None or row[p] > 0, (name, p)
        assert row["fp16"] is None or row["fp16"] >= row["fp32"] or "1080" in name, name


@pytest.mark.parametrize(
    "change, message",
    [
        (lambda row: row.update(fp32="15.7"), "field 'devices.Tesla V100-SXM2-16GB.fp32': expected a number or null, got str '15.7'"),
        (lambda row: row.update(bf16=0), "field 'devices.Tesla V100-SXM2-16GB.bf16': expected a number > 0, got int 0"),
        (
            lambda row: row.update(fp8=1000.0),
            "field 'devices.Tesla V100-SXM2-16GB': unknown key 'fp8' (known: aliases, fp32, fp16, bf16, tf32, memory_gbps, source)",
        ),
        (lambda row: row.pop("source"), "field 'devices.Tesla V100-SXM2-16GB.source': missing (expected a string)"),
    ],
)
def test_a_peak_table_row_against_its_schema_is_named(change, message):
    import copy

    from dawnpipe.errors import DawnpipeError
    from dawnpipe.telemetry.peaks import checked_peaks

    doc = {"devices": copy.deepcopy(peak_table())}
    checked_peaks(doc)  # the shipped table passes
    change(doc["devices"]["Tesla V100-SXM2-16GB"])
    with pytest.raises(DawnpipeError) as e:
        checked_peaks(doc, "peaks.yaml")
    assert str(e.value) == f"peaks.yaml: {message}"


@pytest.mark.parametrize(
    "name, key",
    [
        ("NVIDIA A100-SXM4-40GB", "NVIDIA A100-SXM4-40GB"),
        ("a100-sxm4-40gb", "NVIDIA A100-SXM4-40GB"),
        ("Tesla V100-SXM2-32GB", "Tesla V100-SXM2-16GB"),
        ("GeForce GTX 1080 Ti", "NVIDIA GeForce GTX 1080 Ti"),
    ],
)
def test_gpu_peak_lookup(name, key):
    assert gpu_peak(name)["device"] == key


def test_device_peak_of_a_gpu_run_scales_with_devices():
    env = {"device": "cuda:0", "gpus": ["NVIDIA A100-SXM4-40GB"] * 8, "world_size": 8}
    p = device_peak(env, None, "bf16")
    assert p["compute_tflops"] == pytest.approx(8 * 312.0) and p["memory_gbps"] == 8 * 1555
    assert device_peak({"device": "cuda:0", "gpus": ["Tesla V100-SXM2-16GB"]}, None, "bf16")["compute_tflops"] is None  # no bf16 on Volta
    assert "not in" in device_peak({"device": "cuda:0", "gpus": ["Some Future GPU"]}, None, "fp32")["source"]
    # TensorFlow records logical names; the sampler's NVML names are the hardware's
    tf_env = {"device": "cuda:0", "gpus": ["/device:GPU:0"]}
    assert device_peak(tf_env, {"devices": [{"device": "gpu0", "kind": "gpu", "name": "Tesla T4"}]}, "fp16")["compute_tflops"] == 65.0


def test_cpu_probe_for_real():
    import torch  # noqa: F401

    p = probe_cpu("pytorch", ("fp32",), size=128, seconds=0.05, copy_mb=8)
    assert p["fp32_tflops"] > 0 and p["memory_gbps"] > 0 and p["threads"] >= 1
    q = probe_cpu("tensorflow", ("fp32", "bf16"), size=128, seconds=0.05, copy_mb=8)
    assert q["fp32_tflops"] > 0 and q["bf16_tflops"] is None and "numpy" in q["method"]
    env = {"device": "cpu", "cpu_model": "Test CPU"}
    assert device_peak(env, {"cpu_peak": p}, "fp32")["compute_tflops"] == p["fp32_tflops"]
    json.dumps(p, allow_nan=False)  # goes into run.json as it is


def test_each_precision_has_its_own_measured_peak_and_no_other_stands_in():
    """A bf16 run is compared with the bf16 matrix-multiply peak, int8 with int8's, each measured on a tiny matrix."""
    import torch  # noqa: F401

    p = probe_cpu("pytorch", ("fp32", "bf16", "int8"), size=128, seconds=0.05, copy_mb=8)
    assert p["fp32_tflops"] > 0 and p["int8_tflops"] > 0 and "torch._int_mm" in p["method"]
    assert p["bf16_tflops"] is None or p["bf16_tflops"] > 0  # a CPU build without bf16 matmul records none
    env = {"device": "cpu", "cpu_model": "Test CPU"}
    for precision in ("fp32", "int8"):
        peak = device_peak(env, {"cpu_peak": p}, precision)
        assert (peak["precision"], peak["compute_tflops"], peak["method"]) == (precision, p[f"{precision}_tflops"], p["method"])
    only_fp32 = probe_cpu("pytorch", ("fp32",), size=64, seconds=0.01, copy_mb=1)
    peak = device_peak(env, {"cpu_peak": only_fp32}, "bf16")
    assert peak["precision"] == "bf16" and peak["compute_tflops"] is None  # not fp32's peak in its place
    assert "no bf16 rate in the probe" in peak["source"]
    gpu = device_peak({"device": "cuda:0", "gpus": ["Tesla T4"]}, None, "fp16")
    assert (gpu["precision"], gpu["method"]) == ("fp16", "datasheet")


def test_nan_free_summary_for_run_json(tmp_path):
    with sampling(tmp_path / "t.parquet", 0.05, powercap=tmp_path / "none", nvml=NvmlStandIn([])) as s:
        pass
    json.dumps(s.summary(), allow_nan=False)
    assert not math.isnan(s.summary()["duration_s"])


def test_negative_interval_is_a_usage_error(tmp_path):
    from dawnpipe.errors import UsageError

    with pytest.raises(UsageError, match="-1"):
        with sampling(tmp_path / "t.parquet", -1):
            pass
