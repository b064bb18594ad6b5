"""A study's page and its own figure (dawnpipe.report.study): which figure a
study gets (its ``figure:`` key, else what it varies), the scaling figure
(speed-up of time per epoch against speed-up of time to accuracy; cost
against time, or why there is no cost) with its points recomputed here from
the summary's medians, and the schema's one-line error for a figure it does
not know. The page in a real browser: tests/test_page_browser.py."""

from __future__ import annotations

import pytest
import yaml
from conftest import ROOT, chart_specs, run_cli

from dawnpipe.report.study import figure_kind, render, study_figure
from dawnpipe.studies import load_study

SMOKE = ROOT / "config/entries/smoke"
BASE = {"base": "smoke-fastnet", "seeds": [0], "ladder": [80.0]}


def study_file(tmp_path, doc) -> str:
    path = tmp_path / "s.yaml"
    path.write_text(yaml.safe_dump({**BASE, **doc}))
    return str(path)


@pytest.mark.parametrize(
    "doc, kind",
    [
        ({"design": "one-at-a-time", "factors": {"procs": {"2": {"distributed.processes_per_node": 2}}}}, "scaling"),
        (
            {"design": "factorial", "factors": {"procs": {"2": {"distributed.processes_per_node": 2}}, "batch": {"128": {"hyperparameters.batch_size": 128}}}},
            "scaling",
        ),
        (
            {"design": "one-at-a-time", "factors": {"batch": {"32": {"hyperparameters.batch_size": 32}, "128": {"hyperparameters.batch_size": 128}}}},
            "batch-size",
        ),
        ({"design": "one-at-a-time", "factors": {"batch": {"128": {"hyperparameters.batch_size": 128}}}}, "none"),
        ({"design": "lesion", "tricks": {"nesterov": {"hyperparameters.nesterov": False}}}, "tricks"),
        # the key wins over the rule
        ({"design": "one-at-a-time", "figure": "scaling", "factors": {"batch": {"128": {"hyperparameters.batch_size": 128}}}}, "scaling"),
        ({"design": "one-at-a-time", "figure": "none", "factors": {"procs": {"2": {"distributed.processes_per_node": 2}}}}, "none"),
    ],
)
def test_the_figure_a_study_gets(tmp_path, doc, kind):
    assert figure_kind(load_study(study_file(tmp_path, doc), SMOKE)) == kind


def test_an_unknown_figure_is_one_line_naming_the_field(tmp_path):
    path = study_file(tmp_path, {"design": "one-at-a-time", "figure": "pie", "factors": {"batch": {"128": {"hyperparameters.batch_size": 128}}}})
    proc = run_cli("study", "variants", path, "--entries-dir", str(SMOKE))
    assert proc.returncode == 1 and "Traceback" not in proc.stderr
    assert len(proc.stderr.strip().splitlines()) == 1 and "field 'figure'" in proc.stderr and path in proc.stderr, proc.stderr


def variant(vid, *, tta_h, epoch_s, usd_per_hour, world=1, hardware="local-cpu"):
    """A variant of a study summary as dawnpipe.report.study.summarize writes it (two seeds)."""
    runs = [{"seed": s, "curve": {"hours": [tta_h / 2, tta_h, tta_h * 1.5], "metric": [60.0, 80.0 + s, 85.0], "train_loss": [1.0, 0.6, 0.5]}} for s in (0, 1)]
    return {
        "id": vid,
        "overrides": {} if vid == "base" else {"distributed.processes_per_node": world},
        "same_as": None,
        "batch_size": 64,
        "world_size": world,
        "runs": runs,
        "median_time_to_accuracy_hours": {"80.0": tta_h},
        "reached_fraction": {"80.0": 1.0 if tta_h else 0.0},
        "final_accuracy": 85.0,
        "final_held_out_accuracy": None,
        "generalization_gap": None,
        "median_epochs_to_accuracy": 2.0,
        "tta_cov": 0.02,
        "items_per_second": 1000.0 * world,
        "median_seconds_per_epoch": epoch_s,
        "hardware": hardware,
        "usd_per_hour": usd_per_hour,
        "median_cost_to_accuracy_usd": {"80.0": tta_h * usd_per_hour if tta_h and usd_per_hour is not None else None},
    }


def scaling_summary(usd_per_hour=0.1):
    variants = [
        variant("base", tta_h=0.02, epoch_s=30.0, usd_per_hour=usd_per_hour),
        variant("base+procs=2", tta_h=0.0125, epoch_s=16.0, usd_per_hour=usd_per_hour, world=2),
        variant("base+procs=4", tta_h=0.01, epoch_s=10.0, usd_per_hour=usd_per_hour, world=4),
    ]
    base = variants[0]
    for v in variants:
        v["speedup"] = {"80.0": base["median_time_to_accuracy_hours"]["80.0"] / v["median_time_to_accuracy_hours"]["80.0"]}
        v["epoch_speedup"] = base["median_seconds_per_epoch"] / v["median_seconds_per_epoch"]
    return {
        "study": "scaling-<b>",
        "description": "processes",
        "claim": "more processes, less time",
        "base": "base",
        "design": "one-at-a-time",
        "figure": "scaling",
        "seeds": [0, 1],
        "study_file_seeds": None,
        "ladder": [80.0],
        "continue_past_threshold": True,
        "metric": "top-1 accuracy (%)",
        "generated": "now",
        "variants": variants,
    }


def test_the_scaling_figure_draws_each_variants_speed_ups_and_its_cost_against_its_time():
    summary = scaling_summary()
    title, figure = study_figure(summary)
    assert "time per epoch" in title and "cost against time" in title
    speedups, cost = chart_specs(str(figure))
    points = {n: (x, y) for t in speedups["data"] if t["mode"] == "markers" for n, x, y in zip(t["text"], t["x"], t["y"])}
    # (time per epoch of the base / the variant's, time to accuracy of the base / the variant's)
    assert points["2 processes (base+procs=2)"] == pytest.approx((30.0 / 16.0, 0.02 / 0.0125))
    assert points["4 processes (base+procs=4)"] == pytest.approx((3.0, 2.0))
    assert points["1 process (base)"] == pytest.approx((1.0, 1.0))
    diagonal = next(t for t in speedups["data"] if t["name"] == "equal speed-ups")
    assert diagonal["x"] == diagonal["y"]
    costs = {t["name"]: (t["x"][0], t["y"][0]) for t in cost["data"]}
    assert costs == {"base": pytest.approx((1.2, 0.002)), "base+procs=2": pytest.approx((0.75, 0.00125)), "base+procs=4": pytest.approx((0.6, 0.001))}


def test_without_a_price_the_scaling_figure_says_which_hardware_has_none():
    summary = scaling_summary(usd_per_hour=None)
    _, figure = study_figure(summary)
    assert len(chart_specs(str(figure))) == 1 and "no price for local-cpu in the price table" in str(figure)
    page = render(summary)
    assert page.count('<script id="plotly-js">') == 1 and "scaling-&lt;b&gt;" in page and "no price" in page


def test_a_variant_that_did_not_reach_is_named_not_drawn():
    summary = scaling_summary()
    slow = summary["variants"][2]
    slow["median_time_to_accuracy_hours"]["80.0"] = None
    slow["speedup"]["80.0"] = None
    slow["median_cost_to_accuracy_usd"]["80.0"] = None
    _, figure = study_figure(summary)
    speedups, cost = chart_specs(str(figure))
    assert "base+procs=4" not in str(speedups["data"]) and "base+procs=4" not in [t["name"] for t in cost["data"]]
    assert "Not drawn (did not reach 80.0 or no epoch time): base+procs=4" in str(figure)


def test_a_variant_run_as_another_studys_or_an_entrys_recipe_keeps_its_curves():
    """A recipe runs once in the whole configuration, so a variant's runs may
    be another study's variant or a config entry (``same_as``): its curves
    are on its own study's page, under its own id. Only a variant that is
    another row of the same study (the base here) is drawn once, under that row."""
    summary = scaling_summary()
    summary["variants"][1]["same_as"] = "fastnet-2proc"  # an entry of the config, or another study's variant
    summary["variants"][2]["same_as"] = "base"  # this study's own base: its runs are drawn as the base's
    accuracy, loss = chart_specs(render(summary))[:2]
    drawn = ["base seed 0", "base seed 1", "base+procs=2 seed 0", "base+procs=2 seed 1"]
    assert [t["name"] for t in accuracy["data"] if t["name"] != "top rung 80"] == drawn
    assert [t["name"] for t in loss["data"]] == drawn
    # the curve drawn is the variant's own runs' (its hours in seconds: the page's longest run is 108 s; its accuracies)
    shared = next(t for t in accuracy["data"] if t["name"] == "base+procs=2 seed 1")
    assert accuracy["layout"]["xaxis"]["title"]["text"] == "training time (s)"
    assert shared["x"] == pytest.approx([22.5, 45.0, 67.5]) and shared["y"] == [60.0, 81.0, 85.0]
    # two rows run as one outside recipe are the same runs: drawn once, under the first
    summary["variants"][2]["same_as"] = "fastnet-2proc"
    accuracy = chart_specs(render(summary))[0]
    assert [t["name"] for t in accuracy["data"] if t["name"] != "top rung 80"] == drawn


def test_the_page_says_when_the_configs_study_seeds_ran_in_place_of_the_files():
    summary = scaling_summary()
    assert "in place of the study file" not in render(summary)
    summary.update(seeds=[7], study_file_seeds=[0, 1, 2])
    assert "seeds 7 (the configuration's study_seeds, in place of the study file's 0, 1, 2); runs" in render(summary)
