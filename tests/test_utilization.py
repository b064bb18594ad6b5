"""FLOP counts, the threshold ladder, the utilization stage and the report
sections of the analysis metrics (docs/rules.md#analysis-metrics), on
hand-computed cases."""

from __future__ import annotations

import json
import re

import numpy as np
import pandas as pd
import pytest
import torch
from conftest import CHART_DATA, chart_specs, run_cli

from dawnpipe import leaderboard
from dawnpipe.metrics.sensitivity import ladder_for, rungs
from dawnpipe.metrics.utilization import utilization
from dawnpipe.report import telemetry_sections
from dawnpipe.report.charts import roofline_chart
from dawnpipe.tasks import get_task


# ------------------------------------------------------------------ FLOPs
def _batch(shape, classes):
    return lambda n: (torch.randn(n, *shape), torch.randint(0, classes, (n,)))


def test_linear_layer_flops_by_hand():
    from dawnpipe.metrics.flops import per_item

    # forward x @ W^T: 2*I*O per item; backward: the weight gradient only
    # (the input is data, it needs no gradient): 2*I*O more. The bias add is
    # element-wise work, not counted.
    i, o = 8, 4
    counts = per_item(_batch((i,), o), torch.nn.Linear(i, o), batch_size=32)
    assert counts["flops_per_item"] == 4 * i * o == 128


def test_two_linear_layers_flops_by_hand():
    from dawnpipe.metrics.flops import per_item

    # layer 1 (8->6): forward 96 + weight grad 96; layer 2 (6->4): forward 48 + input grad 48 + weight grad 48
    model = torch.nn.Sequential(torch.nn.Linear(8, 6), torch.nn.Linear(6, 4))
    assert per_item(_batch((8,), 4), model, batch_size=16)["flops_per_item"] == 96 * 2 + 48 * 3


def test_convolution_flops_by_hand():
    from dawnpipe.metrics.flops import per_item

    # 3x3 conv, 1 -> 2 channels, padding 1 on 4x4: forward 2 * 1*2*9 * 16 = 576 per item; + weight grad 576
    model = torch.nn.Sequential(torch.nn.Conv2d(1, 2, 3, padding=1, bias=False), torch.nn.Flatten())
    assert per_item(_batch((1, 4, 4), 32), model, batch_size=8)["flops_per_item"] == 1152


def test_operand_bytes_amortise_weights_over_the_batch():
    from dawnpipe.metrics.flops import per_item

    model = torch.nn.Linear(256, 256)
    small, large = per_item(_batch((256,), 256), model, 4), per_item(_batch((256,), 256), model, 512)
    assert small["flops_per_item"] == large["flops_per_item"]
    assert large["arithmetic_intensity"] > 4 * small["arithmetic_intensity"]  # weights are read once per step, not per item


def test_flops_cli_on_real_prepared_data(tmp_path, prepared_fashion_mnist):
    out = tmp_path / "flops.json"
    proc = run_cli("flops", "--entry", "config/entries/resnet20-dawn.yaml", "--data", str(prepared_fashion_mnist), "--out", str(out), check=True)
    rec = json.loads(out.read_text())
    assert rec["counted"] and rec["item_shape"] == [1, 28, 28]
    # ResNet-20 on 28x28 grey images, forward, 2 FLOPs per multiply-add (k = 3x3 = 9):
    stem = 2 * 1 * 16 * 9 * 28 * 28  # 225,792
    stage1 = 6 * 2 * 16 * 16 * 9 * 28 * 28  # 21,676,032
    stage2 = 2 * 16 * 32 * 9 * 14 * 14 + 5 * 2 * 32 * 32 * 9 * 14 * 14 + 2 * 16 * 32 * 14 * 14  # + 1x1 shortcut
    stage3 = 2 * 32 * 64 * 9 * 7 * 7 + 5 * 2 * 64 * 64 * 9 * 7 * 7 + 2 * 32 * 64 * 7 * 7
    forward = stem + stage1 + stage2 + stage3 + 2 * 64 * 10  # 62,043,904
    # backward: input and weight gradients of every layer (2x forward), except the stem's input gradient
    assert rec["flops_per_item"] == 3 * forward - stem == 185_905_920
    assert rec["arithmetic_intensity"] > 0 and "MFLOP per item" in proc.stdout


# ------------------------------------------------------------------ threshold ladder
LOG = {"epoch": [1, 2, 3, 4, 5], "hours": [0.01, 0.02, 0.03, 0.04, 0.05], "top1Accuracy": [85.0, 90.5, 91.2, 90.9, 92.4]}


def test_ladder_by_hand_from_a_log():
    got = rungs(LOG["epoch"], LOG["hours"], LOG["top1Accuracy"], [90, 91, 92, 93], run_threshold=93.0, stopped_early=False)
    assert [(g["threshold"], g["status"], g["epoch"], g["hours"]) for g in got] == [
        (90.0, "reached", 2.0, 0.02),
        (91.0, "reached", 3.0, 0.03),
        (92.0, "reached", 5.0, 0.05),
        (93.0, "not reached", None, None),
    ]


def test_ladder_above_a_stopped_run_is_not_observed():
    log = {k: v[:3] for k, v in LOG.items()}  # the run stopped at 91 after epoch 3
    got = rungs(log["epoch"], log["hours"], log["top1Accuracy"], [90, 91, 92, 93], run_threshold=91.0, stopped_early=True)
    assert [g["status"] for g in got] == ["reached", "reached", "not observed", "not observed"]
    budget_ended = rungs(log["epoch"], log["hours"], log["top1Accuracy"], [92], run_threshold=91.0, stopped_early=False)
    assert budget_ended[0]["status"] == "not reached"


def test_ladder_always_holds_the_official_and_the_run_threshold():
    task = get_task("fashion-mnist")
    assert ladder_for(task, None, 70.0) == [70.0, 90.0, 91.0, 92.0, 93.0]
    assert ladder_for(task, [50, 60], 70.0) == [50.0, 60.0, 70.0, 93.0]


def test_sensitivity_cli_by_hand(tmp_path):
    tsv = tmp_path / "train.tsv"
    pd.DataFrame(LOG).to_csv(tsv, sep="\t", index=False)
    run_json = tmp_path / "run.json"
    info = {
        "entry": "e",
        "seed": 0,
        "task": "fashion-mnist",
        "model": "fastnet",
        "framework": "pytorch",
        "hardware": "local-cpu",
        "threshold": 93.0,
        "official_threshold": 93.0,
        "demo_threshold": False,
        "result": {"stopped_at_threshold": False},
    }
    run_json.write_text(json.dumps(info))
    out = tmp_path / "s.json"
    run_cli("sensitivity", "--tsv", str(tsv), "--run-json", str(run_json), "--out", str(out), "--ladder", "90", "91.5", "92", check=True)
    rec = json.loads(out.read_text())
    assert [(r["threshold"], r["epoch"]) for r in rec["rungs"]] == [(90.0, 2.0), (91.5, 5.0), (92.0, 5.0), (93.0, None)]
    # the config's per-task mapping, as Snakemake and DVC pass it: only the run's task counts
    run_cli("sensitivity", "--tsv", str(tsv), "--run-json", str(run_json), "--out", str(out), "--fashion-mnist", "90", "91", "--cifar10", "50", check=True)
    assert [r["threshold"] for r in json.loads(out.read_text())["rungs"]] == [90.0, 91.0, 93.0]
    bad = run_cli("sensitivity", "--tsv", str(tsv), "--run-json", str(run_json), "--out", str(out), "--ladder", "120")
    assert bad.returncode == 1 and "120" in bad.stderr and "Traceback" not in bad.stderr
    # a run.json without a field every later stage relies on: named, with the file
    del info["official_threshold"]
    run_json.write_text(json.dumps(info))
    bad = run_cli("sensitivity", "--tsv", str(tsv), "--run-json", str(run_json), "--out", str(out), "--ladder", "90")
    assert bad.returncode == 1 and f"{run_json}: field 'official_threshold': missing" in bad.stderr and "Traceback" not in bad.stderr


# ------------------------------------------------------------------ utilization stage
def _run_json(device="cpu", telemetry=None, precision="fp32"):
    return {
        "entry": "e",
        "seed": 0,
        "task": "fashion-mnist",
        "framework": "pytorch",
        "threshold": 91.0,
        "demo_threshold": True,
        "settings": {"entry": {"hyperparameters": {"precision": precision}}},
        "environment": {"device": device, "cpu_model": "Test CPU", "gpus": ["NVIDIA A100-SXM4-40GB"] if device != "cpu" else []},
        "telemetry": telemetry or {},
    }


def _log():
    # epochs of 20 s training + 4 s evaluation + 1 s checkpoint; 91% reached in epoch 2
    rows, wall, clock = [], 0.0, 0.0
    for i, metric in enumerate([80.0, 91.5, 93.0], start=1):
        wall += 24
        clock += 20
        rows.append(
            {
                "epoch": i,
                "hours": clock / 3600,
                "wall_hours": wall / 3600,
                "eval_seconds": 4.0,
                "epoch_train_seconds": 20.0,
                "top1Accuracy": metric,
                "items_per_second": 500.0,
            }
        )
        wall += 1
    return pd.DataFrame(rows)


FLOPS = {"counted": True, "flops_per_item": 2e8, "bytes_per_item": 4e6, "arithmetic_intensity": 50.0, "batch_size": 256}


def test_achieved_flops_and_energy_of_a_run_by_hand():
    t = np.arange(0.0, 100.0, 0.5)  # a RAPL package at a constant 60 W, training starting 2 s into the samples
    samples = pd.DataFrame(
        {"t_s": t, "device": "rapl:intel-rapl:0", "kind": "rapl", "name": "package-0", "power_w": np.nan, "energy_j": 60.0 * t, "utilization_pct": np.nan}
    )
    tele = {"training_clock_origin_s": 2.0, "interval_s": 0.5, "cpu_peak": {"fp32_tflops": 0.4, "memory_gbps": 10.0, "method": "test probe"}}
    rec = utilization(_log(), _run_json(telemetry=tele), FLOPS, samples)
    assert rec["epochs"][0]["achieved_tflops"] == pytest.approx(2e8 * 500 / 1e12)  # 0.1 TFLOP/s
    assert rec["fraction_of_peak_median"] == pytest.approx(0.25)
    e = rec["energy"]
    assert e["source"] == "RAPL" and e["threshold_epoch"] == 2.0
    assert e["energy_to_accuracy_j"] == pytest.approx(60.0 * 40)  # two 20 s training spans
    assert e["wall_energy_to_accuracy_j"] == pytest.approx(60.0 * 49)  # 24 + 1 + 24 s of wall clock
    assert rec["epochs"][1]["mean_power_w"] == pytest.approx(60.0)
    json.dumps(rec, allow_nan=False)


def test_energy_is_not_measured_without_a_meter_and_says_why():
    samples = pd.DataFrame(
        {
            "t_s": [0.0, 1.0],
            "device": "process",
            "kind": "process",
            "power_w": np.nan,
            "energy_j": np.nan,
            "utilization_pct": [100.0, 150.0],
            "memory_used_mb": [500.0, 510.0],
        }
    )
    tele = {"training_clock_origin_s": 0.0, "sources": {"gpu": "NVML unavailable: NVML Shared Library Not Found", "rapl": "/sys/class/powercap absent"}}
    rec = utilization(_log(), _run_json(telemetry=tele), FLOPS, samples)
    assert rec["energy"]["energy_to_accuracy_j"] is None and rec["energy"]["source"] == "none"
    assert "powercap absent" in rec["energy"]["reason"]
    assert rec["peak"]["compute_tflops"] is None and rec["fraction_of_peak_median"] is None  # no probe recorded: no fraction


def test_gpu_run_uses_the_datasheet_peak():
    rec = utilization(_log(), _run_json(device="cuda:0", precision="bf16"), FLOPS, None)
    assert rec["peak"]["compute_tflops"] == 312.0 and "datasheet" in rec["peak"]["source"]
    assert rec["fraction_of_peak_median"] == pytest.approx(0.1 / 312.0)


# ------------------------------------------------------------------ report
def test_roofline_escapes_labels():
    chart = str(roofline_chart([("<script>alert(1)</script>", 10.0, 1e10)], [("fp32 peak <b>", 1e11, 1e10)], title="a&b"))
    assert "<script" not in CHART_DATA.sub("", chart) and 'aria-label="a&amp;b"' in chart
    (spec,) = chart_specs(chart)
    names = [t["name"] for t in spec["data"]]
    assert names == ["fp32 peak &lt;b&gt;", "&lt;script&gt;alert(1)&lt;/script&gt;"] and spec["layout"]["title"]["text"] == "a&amp;b"


def _sens(entry, seed, rungs_):
    return {
        "run": {"entry": entry, "seed": seed},
        "sensitivity": {
            "task": "fashion-mnist",
            "entry": entry,
            "rungs": [{"threshold": t, "status": s, "hours": h, "epoch": 1.0 if h else None} for t, s, h in rungs_],
        },
    }


def test_sensitivity_marks_an_entry_that_wins_low_but_never_reaches_the_official_threshold():
    runs = [
        _sens("quick", 0, [(90.0, "reached", 0.01), (92.0, "not reached", None), (93.0, "not reached", None)]),
        _sens("steady", 0, [(90.0, "reached", 0.02), (92.0, "reached", 0.03), (93.0, "reached", 0.04)]),
        _sens("stopped", 0, [(90.0, "reached", 0.005), (92.0, "not observed", None), (93.0, "not observed", None)]),
    ]
    (section,) = telemetry_sections.sensitivity_by_task(runs)
    rows = {r["entry"]: r for r in section["rows"]}
    assert rows["stopped"]["wins_at"] == [90.0] and rows["stopped"]["unknown"] and not rows["stopped"]["flag"]
    assert rows["steady"]["wins_at"] == [92.0] and not rows["steady"]["flag"]
    runs = runs[:2]
    rows = {r["entry"]: r for r in telemetry_sections.sensitivity_by_task(runs)[0]["rows"]}
    assert rows["quick"]["flag"] and rows["quick"]["wins_at"] == [90.0] and rows["quick"]["official"] == "not reached"
    assert "never reaches official" in str(telemetry_sections.sensitivity_by_task(runs)[0]["chart"])


def test_sensitivity_wins_count_a_seed_that_did_not_converge_as_infinitely_slow():
    """1 of 3 seeds of "lucky" reaches 90 very fast; all 3 of "steady" reach it
    more slowly. Over reaching seeds only, lucky's median (0.01 h) would win;
    with the two DNC seeds as +inf its median is +inf, and steady wins."""
    runs = [
        _sens("lucky", 0, [(90.0, "reached", 0.01), (93.0, "not reached", None)]),
        *(_sens("lucky", k, [(90.0, "not reached", None), (93.0, "not reached", None)]) for k in (1, 2)),
        *(_sens("steady", k, [(90.0, "reached", 0.02 + k / 1000), (93.0, "reached", 0.05)]) for k in range(3)),
    ]
    (section,) = telemetry_sections.sensitivity_by_task(runs)
    rows = {r["entry"]: r for r in section["rows"]}
    assert rows["steady"]["wins_at"] == [90.0] and rows["lucky"]["wins_at"] == [] and not rows["lucky"]["flag"]
    lucky90 = rows["lucky"]["cells"][0]
    assert lucky90["median_hours"] == 0.01 and (lucky90["reached"], lucky90["runs"]) == (1, 3) and lucky90["rank_hours"] is None
    assert rows["steady"]["cells"][0]["rank_hours"] == pytest.approx(0.021)
    # 2 of 3 reaching: the median over all three is the slower of the two that reached, not their median
    runs[1] = _sens("lucky", 1, [(90.0, "reached", 0.03), (93.0, "not reached", None)])
    rows = {r["entry"]: r for r in telemetry_sections.sensitivity_by_task(runs)[0]["rows"]}
    assert rows["lucky"]["cells"][0]["rank_hours"] == 0.03 and rows["lucky"]["cells"][0]["median_hours"] == pytest.approx(0.02)
    assert rows["steady"]["wins_at"] == [90.0] and rows["lucky"]["wins_at"] == []


def test_energy_objective_appears_only_where_measured():
    base = {
        "task": "fashion-mnist",
        "threshold": 93.0,
        "demo_threshold": False,
        "model": "m",
        "hardware": "h",
        "framework": "pytorch",
        "timestamp": "2026-01-01",
        "source": "runs/e/seed0",
    }
    board = leaderboard.build([{**base, "objective": "train_time", "value": 0.01}])
    assert not [t for t in board["objectives"] if t["objective"] == "train_energy"]
    board = leaderboard.build([{**base, "objective": "train_energy", "value": 12_345.0, "energy_source": "NVML"}])
    (table,) = [t for t in board["objectives"] if t["objective"] == "train_energy"]
    assert table["rows"][0]["display"] == "12.3 kJ" and table["rows"][0]["energy_source"] == "NVML"


def test_report_page_shows_the_sections_with_the_energy_source(tmp_path):
    from dawnpipe.report.render import render_html

    log = _log()
    tele = {"training_clock_origin_s": 2.0, "cpu_peak": {"fp32_tflops": 0.4, "memory_gbps": 10.0, "method": "test <probe>"}}
    t = np.arange(0.0, 100.0, 0.5)
    samples = pd.DataFrame({"t_s": t, "device": "rapl:intel-rapl:0", "kind": "rapl", "power_w": np.nan, "energy_j": 60.0 * t, "utilization_pct": np.nan})
    util = utilization(log, _run_json(telemetry=tele), FLOPS, samples)
    run = {
        "run": {
            "entry": "e",
            "seed": 0,
            "task": "fashion-mnist",
            "threshold": 91.0,
            "demo_threshold": True,
            "environment": {"cpu_model": "x", "threads": 2, "framework": "pytorch", "framework_version": "2", "git": {"commit": None}},
        },
        "tta": {
            "threshold": 91.0,
            "demo_threshold": True,
            "reached": True,
            "epochs_to_accuracy": 2.0,
            "time_to_accuracy_hours": 40 / 3600,
            "wall_time_to_accuracy_hours": 49 / 3600,
            "best_metric": 93.0,
        },
        "latency": {"latency_mean_ms": 1.0, "latency_p50_ms": 1.0, "latency_p90_ms": 1.0, "latency_p99_ms": 1.0, "accuracy": 92.0},
        "log": log,
        "utilization": util,
        "sensitivity": {"task": "fashion-mnist", "entry": "e", "rungs": [{"threshold": 91.0, "status": "reached", "hours": 40 / 3600, "epoch": 2.0}]},
    }
    board = leaderboard.build([])
    board["generated"], board["config"] = "now", "test"
    html = render_html(board, [run], [], config_name="test")
    assert 'id="utilization"' in html and 'id="sensitivity"' in html
    assert "2.4 kJ" in html and "RAPL" in html  # 60 W x 40 s of training
    assert "test &lt;probe&gt;" in html and "test <probe>" not in html
    assert re.search(r"25\.0%", html)  # 0.1 of 0.4 TFLOP/s


def test_entries_without_a_flop_counter_say_why(tmp_path):
    from dawnpipe.entries import load_entry
    from dawnpipe.metrics.flops import count_entry

    squad = count_entry(load_entry("config/entries/drqa-small.yaml"), tmp_path / "not-read")
    assert not squad["counted"] and "not images" in squad["reason"]
    keras = count_entry({**load_entry("config/entries/fastnet.yaml"), "framework": "tensorflow"}, tmp_path / "not-read")
    assert not keras["counted"] and "tensorflow" in keras["reason"]


def test_energy_rows_and_exclusions_of_our_runs():
    from dawnpipe.report.rows import objective_rows

    def run(seed, reached, energy):
        return {
            "run": {"entry": "e", "seed": seed, "model": "m", "hardware": "h", "framework": "pytorch", "finished": "2026-01-01T00:00:00"},
            "tta": {
                "task": "fashion-mnist",
                "threshold": 93.0,
                "demo_threshold": False,
                "reached": reached,
                "epochs_to_accuracy": 2.0 if reached else None,
                "time_to_accuracy_hours": 0.01 if reached else None,
                "wall_time_to_accuracy_hours": 0.02 if reached else None,
                "cost_usd": None,
                "reason": None if reached else "did not converge",
            },
            "latency": {"backend": "eager", "threads": 1, "accuracy": 90.0, "items": 10, "meets_threshold": False, "threshold": 93.0, "metric": "top1Accuracy"},
            "utilization": {"energy": energy},
        }

    measured = {"energy_to_accuracy_j": 500.0, "run_j": 900.0, "source": "RAPL"}
    unmeasured = {"energy_to_accuracy_j": None, "run_j": None, "source": "none"}
    rows, _ = objective_rows([run(0, True, measured), run(1, True, unmeasured)])
    energy = [r for r in rows if r["objective"] == "train_energy"]
    assert [(r["seeds"], r["value"], r["energy_source"]) for r in energy] == [([0], 500.0, "RAPL")]  # seed 1: not measured, not shown
    # a seed that did not converge but was metered counts as not reaching: one of two, so no median
    rows, excluded = objective_rows([run(0, True, measured), run(1, True, unmeasured), run(2, False, {**measured, "energy_to_accuracy_j": None})])
    assert not [r for r in rows if r["objective"] == "train_energy"]
    (dnc,) = [e for e in excluded if "train_time" in e["objectives"]]
    assert dnc["source"] == "runs/e/seed2" and "train_energy" in dnc["objectives"]
    (no_median,) = [e for e in excluded if e["source"] == "runs/e"]
    assert no_median["objectives"] == ["train_energy"] and no_median["reason"].startswith("1 of 2 seeds did not reach the threshold")


def test_the_energy_of_a_multi_node_run_is_not_ranked():
    """Rank 0 samples its own node: a 2-node run's energy is half a figure, excluded with that reason."""
    from dawnpipe.report.rows import objective_rows

    run = {
        "run": {
            "entry": "e",
            "seed": 0,
            "model": "m",
            "hardware": "2 x h (4 processes)",
            "framework": "pytorch",
            "nodes": 2,
            "finished": "2026-01-01T00:00:00",
        },
        "tta": {
            "task": "fashion-mnist",
            "threshold": 93.0,
            "demo_threshold": False,
            "reached": True,
            "epochs_to_accuracy": 2.0,
            "time_to_accuracy_hours": 0.01,
            "wall_time_to_accuracy_hours": 0.02,
            "cost_usd": 0.5,
            "reason": None,
        },
        "utilization": {"energy": {"energy_to_accuracy_j": 500.0, "run_j": 900.0, "source": "RAPL"}},
    }
    rows, excluded = objective_rows([run])
    assert {r["objective"] for r in rows} == {"train_time", "train_cost"}
    [energy] = excluded
    assert energy["objectives"] == ["train_energy"] and "node 0 of 2 only" in energy["reason"]
