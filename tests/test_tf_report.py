"""The framework comparison of the report (dawnpipe.report.frameworks and its
section of the HTML page), on hand-made runs whose figures are known."""

from __future__ import annotations

import pandas as pd
import pytest

from dawnpipe import leaderboard
from dawnpipe.report.frameworks import framework_comparison
from dawnpipe.report.render import render_html


def latency(backend, latency_ms, meets=True):
    return {
        "latency_mean_ms": latency_ms,
        "latency_p50_ms": latency_ms,
        "latency_p90_ms": latency_ms,
        "latency_p99_ms": latency_ms,
        "accuracy": 71.0 if meets else 50.0,
        "meets_threshold": meets,
        "backend": backend,
    }


def make_run(entry, framework, seed, epoch_seconds, *, model="resnet20", reached_hours=None, latency_ms=2.0, threshold=70.0, backend=None, others=()):
    """``others``: more inference results of the run (other backends), beside the framework's own."""
    epochs = len(epoch_seconds)
    hours = pd.Series(epoch_seconds).cumsum() / 3600.0
    log = pd.DataFrame(
        {
            "epoch": range(1, epochs + 1),
            "top1Accuracy": [60.0 + e for e in range(epochs)],
            "hours": hours,
            "wall_hours": hours * 1.5,
            "train_loss": 1.0,
            "eval_loss": 1.0,
            "eval_seconds": 0.5,
            "checkpoint_seconds": 0.1,
            "epoch_train_seconds": epoch_seconds,
            "lr": 0.1,
            "items_per_second": [3000 / s for s in epoch_seconds],
        }
    )
    reached = reached_hours is not None
    mine = latency(backend or {"pytorch": "eager", "tensorflow": "tf-function"}[framework], latency_ms)
    return {
        "run": {
            "entry": entry,
            "seed": seed,
            "task": "fashion-mnist",
            "model": model,
            "hardware": "local-cpu",
            "framework": framework,
            "threshold": threshold,
            "demo_threshold": True,
            "environment": {
                "framework": framework,
                "framework_version": {"pytorch": "2.13.0", "tensorflow": "2.21.0"}[framework],
                "cpu_model": "test CPU",
                "threads": 2,
                "git": {"commit": None, "dirty": None},
            },
        },
        "tta": {
            "reached": reached,
            "time_to_accuracy_hours": reached_hours,
            "threshold": threshold,
            "demo_threshold": True,
            "epochs_to_accuracy": 2 if reached else None,
            "wall_time_to_accuracy_hours": reached_hours * 1.5 if reached else None,
            "best_metric": 61.0,
            "training_hours": float(hours.iloc[-1]),
            "epochs_run": epochs,
        },
        "latency": mine,
        "latencies": sorted([mine, *others], key=lambda lat: lat["latency_mean_ms"]),
        "log": log,
    }


RUNS = [
    make_run("resnet20-dawn", "pytorch", 0, [12.0, 10.0, 10.0], reached_hours=0.01, latency_ms=4.0),
    make_run("resnet20-dawn", "pytorch", 1, [14.0, 10.0, 10.0], reached_hours=0.02, latency_ms=6.0),
    make_run("resnet20-dawn-tf", "tensorflow", 0, [30.0, 20.0], reached_hours=0.03, latency_ms=2.0),
    make_run("resnet20-dawn-tf", "tensorflow", 1, [28.0, 20.0, 22.0], reached_hours=None, latency_ms=3.0),
    make_run("fastnet", "pytorch", 0, [5.0, 5.0], model="fastnet", reached_hours=0.001),  # one framework: not compared
]


def test_comparison_groups_one_model_in_several_frameworks():
    rows = framework_comparison(RUNS)
    assert [(r["model"], r["framework"]) for r in rows] == [("resnet20", "pytorch"), ("resnet20", "tensorflow")]
    torch_row, tf_row = rows
    assert torch_row["seeds"] == [0, 1] and tf_row["seeds"] == [0, 1]
    assert torch_row["epoch_seconds_median"] == 10.0  # median of 12, 10, 10, 14, 10, 10
    assert tf_row["epoch_seconds_median"] == 22.0  # median of 30, 20, 28, 20, 22
    assert torch_row["first_epoch_seconds_mean"] == 13.0 and tf_row["first_epoch_seconds_mean"] == 29.0
    assert torch_row["time_to_accuracy_hours_mean"] == pytest.approx(0.015) and torch_row["reached_runs"] == 2
    assert tf_row["time_to_accuracy_hours_mean"] == pytest.approx(0.03) and tf_row["reached_runs"] == 1  # seed 1 did not converge
    assert torch_row["latency_mean_ms"] == 5.0 and tf_row["latency_mean_ms"] == 2.5
    assert (torch_row["epoch_ratio"], tf_row["epoch_ratio"]) == (1.0, 2.2)
    assert (torch_row["tta_ratio"], tf_row["tta_ratio"]) == (1.0, pytest.approx(2.0))
    assert (torch_row["latency_ratio"], tf_row["latency_ratio"]) == (2.0, 1.0)
    assert tf_row["framework_versions"] == ["2.21.0"] and tf_row["inference_backends"] == ["tf-function"]


def test_latency_compares_each_framework_s_own_runtime_at_the_threshold_only():
    """PyTorch eager against TensorFlow's tf.function graph: not the runs'
    headline backends (a faster ONNX Runtime or int8 result of the PyTorch run
    is another runtime), and never a result below the threshold."""
    runs = [
        make_run(
            "resnet20-dawn", "pytorch", 0, [10.0], reached_hours=0.01, latency_ms=4.0, others=[latency("onnxruntime", 1.0), latency("onnxruntime-int8", 0.5)]
        ),
        make_run("resnet20-dawn", "pytorch", 1, [10.0], reached_hours=0.01, latency_ms=6.0, others=[latency("onnxruntime", 1.5)]),
        make_run("resnet20-dawn-tf", "tensorflow", 0, [20.0], reached_hours=0.02, latency_ms=2.0),
        make_run("resnet20-dawn-tf", "tensorflow", 1, [20.0], reached_hours=0.02, latency_ms=3.0),
    ]
    runs[1]["latencies"] = [latency("onnxruntime", 1.5), latency("eager", 0.1, meets=False)]  # its eager result is below the threshold
    torch_row, tf_row = framework_comparison(runs)
    assert torch_row["inference_backends"] == ["eager"] and tf_row["inference_backends"] == ["tf-function"]
    assert torch_row["latency_mean_ms"] == 4.0 and torch_row["latency_results"] == 1  # seed 1's 0.1 ms is excluded
    assert tf_row["latency_mean_ms"] == 2.5 and tf_row["latency_results"] == 2
    assert (torch_row["latency_ratio"], tf_row["latency_ratio"]) == (1.6, 1.0)


def test_no_native_result_at_the_threshold_means_no_latency():
    runs = [make_run("a", "pytorch", 0, [10.0], backend="onnxruntime"), make_run("b", "tensorflow", 0, [20.0], latency_ms=3.0)]
    torch_row, tf_row = framework_comparison(runs)
    assert torch_row["latency_mean_ms"] is None and torch_row["latency_ratio"] is None and tf_row["latency_ratio"] == 1.0
    assert torch_row["latency_note"] == "not measured" and tf_row["latency_note"] is None
    assert "(not measured)" in page(runs) and "(none at the threshold)" not in page(runs)  # no eager result at all


def test_a_native_result_below_the_threshold_is_told_apart_from_none():
    runs = [make_run("a", "pytorch", 0, [10.0], latency_ms=1.0), make_run("b", "tensorflow", 0, [20.0], latency_ms=3.0)]
    runs[0]["latencies"] = [latency("eager", 1.0, meets=False)]
    torch_row, _ = framework_comparison(runs)
    assert torch_row["latency_mean_ms"] is None and torch_row["latency_note"] == "none at the threshold"
    assert "(none at the threshold)" in page(runs)


def test_one_row_per_entry():
    """Two PyTorch recipes of the same model are two rows, each with its own seeds, not one merged row."""
    other = make_run("resnet20-fast", "pytorch", 0, [6.0, 6.0], reached_hours=0.005, latency_ms=3.0)
    rows = framework_comparison([*RUNS[:4], other])
    assert [(r["framework"], r["entry"]) for r in rows] == [("pytorch", "resnet20-dawn"), ("pytorch", "resnet20-fast"), ("tensorflow", "resnet20-dawn-tf")]
    dawn, fast, tf_row = rows
    assert dawn["seeds"] == [0, 1] and fast["seeds"] == [0] and fast["epoch_seconds_median"] == 6.0
    assert fast["epoch_ratio"] == 1.0 and tf_row["epoch_ratio"] == pytest.approx(22.0 / 6.0)
    html = page([*RUNS[:4], other])
    assert 'id="framework-fashion-mnist-resnet20-local-cpu-pytorch-resnet20-fast"' in html


def test_runs_against_other_thresholds_are_not_compared():
    other = make_run("resnet20-dawn-tf", "tensorflow", 0, [30.0], reached_hours=0.01, threshold=93.0)
    assert framework_comparison([RUNS[0], other]) == []


def test_no_run_reached_means_no_time_to_accuracy_and_no_ratio():
    rows = framework_comparison([RUNS[3], make_run("resnet20-dawn", "pytorch", 0, [10.0])])
    assert all(r["time_to_accuracy_hours_mean"] is None and r["tta_ratio"] is None for r in rows)


def page(runs, model_name=None) -> str:
    board = leaderboard.build([], [])
    board.update(generated="2026-01-01T00:00:00+00:00", config="test", frameworks=framework_comparison(runs))
    shown = [{k: v for k, v in r.items() if k != "latencies"} for r in runs]  # the comparison only, not the inference section
    return render_html(board, shown, [], config_name="config/test.yaml")


def test_page_shows_the_comparison_section():
    html = page(RUNS)
    section = html[html.index('<h2 id="frameworks">') :]
    section = section[: section.index("</table>")]
    assert 'id="framework-fashion-mnist-resnet20-local-cpu-tensorflow-resnet20-dawn-tf"' in section
    assert "22.00 (2.20x)" in section and "10.00 (1.00x)" in section  # time per epoch
    assert "0:01:48 (2.00x), 1/2 reached" in section  # 0.03 h = 108 s
    assert "2.5000 (1.00x)" in section and "tf-function" in section
    assert "fastnet" not in section


def test_page_without_two_frameworks_has_no_comparison():
    assert 'id="frameworks"' not in page([RUNS[0], RUNS[4]])


def test_model_names_are_escaped_in_the_comparison():
    runs = [make_run("a", "pytorch", 0, [1.0], model="<script>x</script>"), make_run("b", "tensorflow", 0, [1.0], model="<script>x</script>")]
    html = page(runs)
    assert "<script>x</script>" not in html and "&lt;script&gt;x&lt;/script&gt;" in html
