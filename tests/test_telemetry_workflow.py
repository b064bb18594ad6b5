"""End to end (the analysis metrics, docs/rules.md#analysis-metrics): the real
workflow of config/test.yaml leaves, for every run, its telemetry, FLOP count,
utilization and threshold ladder, and the page shows the roofline and the
sensitivity sections."""

from __future__ import annotations

import json

import pandas as pd
import pytest
from conftest import probe_seconds_of_test_config

from dawnpipe.models.precision import used_precision
from dawnpipe.telemetry.sampler import COLUMNS

pytestmark = pytest.mark.slow


def _runs(root):
    return sorted((root / "results" / "runs").glob("*/seed*"))


def test_every_run_has_telemetry_utilization_and_ladder(test_workflow):
    runs = _runs(test_workflow)
    assert len(runs) == 4
    for run in runs:
        info = json.loads((run / "run.json").read_text())
        tele = info["telemetry"]
        assert tele["outcome"] == "completed" and tele["error"] is None
        assert tele["training_clock_origin_s"] is not None
        if info["result"].get("resumed_from_epoch") is None:  # a resumed run's clock began before this process
            assert tele["training_clock_origin_s"] >= 0
        assert tele["cpu_peak"]["fp32_tflops"] > 0  # this machine is a CPU: the probe ran
        assert f"best of repeated runs in {probe_seconds_of_test_config():g} s" in tele["cpu_peak"]["method"]  # config/test.yaml's length
        samples = pd.read_parquet(run / "telemetry.parquet")
        assert list(samples.columns) == COLUMNS and (samples["kind"] == "process").sum() == tele["samples"] >= 2
        assert list(pd.read_parquet(run / "inference_telemetry.parquet").columns) == COLUMNS

        util = json.loads((run / "utilization.json").read_text())
        # the arithmetic the run computed in (fastnet's precision: auto, resolved for this CPU), its peak that one's
        requested = info["settings"]["entry"]["hyperparameters"]["precision"]
        assert info["environment"]["precision"] == used_precision(requested, "cpu")[0] == util["precision"], info["environment"]
        assert info["environment"]["precision_from"] == used_precision(requested, "cpu")[1]
        log = pd.read_parquet(run / "train.parquet")
        flops = json.loads((test_workflow / "results" / "flops" / f"{info['entry']}.json").read_text())
        assert [e["epoch"] for e in util["epochs"]] == log["epoch"].tolist()
        assert util["epochs"][0]["achieved_tflops"] == pytest.approx(flops["flops_per_item"] * log["items_per_second"].iloc[0] / 1e12)
        assert 0 < util["fraction_of_peak_median"]
        assert util["energy"]["source"] in ("none", "RAPL")  # no GPU here; RAPL only where the kernel exposes it
        if util["energy"]["source"] == "none":
            assert util["energy"]["energy_to_accuracy_j"] is None and util["energy"]["reason"]

        sens = json.loads((run / "sensitivity.json").read_text())
        tta = json.loads((run / "time_to_accuracy.json").read_text())
        assert [r["threshold"] for r in sens["rungs"]] == [35.0, 40.0, 45.0, 50.0, 93.0]  # config/test.yaml's ladder + run + official
        own = next(r for r in sens["rungs"] if r["threshold"] == tta["threshold"])
        assert own["hours"] == tta["time_to_accuracy_hours"]  # the same rule as the training objective


def test_page_shows_roofline_and_sensitivity(test_workflow):
    html = (test_workflow / "results" / "leaderboard.html").read_text()
    assert 'id="utilization"' in html and "Roofline:" in html and 'id="sensitivity"' in html
    assert "arithmetic intensity" in html
