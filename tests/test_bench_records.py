"""Records of measurements and the tables generated from them: what a bench
script's --record writes (bench/record.py), a study's record
(bench/studies.py), how scripts/docs.py renders each, and how the bench
scripts get the data they need (bench/inputs.py). Every record here lives in
a temporary directory: a test never writes docs/measurements/."""

from __future__ import annotations

import importlib.util
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
from conftest import ROOT

sys.path.insert(0, str(ROOT / "bench"))

import inputs
import record
import studies

from dawnpipe.errors import DawnpipeError

spec = importlib.util.spec_from_file_location("docs_generator", ROOT / "scripts/docs.py")
docs = importlib.util.module_from_spec(spec)
spec.loader.exec_module(docs)

MACHINE = {"cpu_model": "Test CPU", "cpu_count": 2, "memory_gib": 8.0, "platform": "Linux-test", "python": "3.11.7", "torch": "2.13.0+cpu", "gpus": []}


def a_record(name: str, result: dict, command: str) -> dict:
    return {
        "name": name,
        "command": command,
        "date": "2026-11-27T01:02:03+00:00",
        "commit": "0123456789abcdef0123456789abcdef01234567",
        "dirty": False,
        "machine": MACHINE,
        "load_average": {"start": [0.1, 0.2, 0.3], "end": [1.5, 0.5, 0.4]},
        "result": result,
    }


def page_with(tmp_path: Path, *names: str) -> Path:
    page = tmp_path / "docs" / "page.md"
    page.parent.mkdir(parents=True, exist_ok=True)
    blocks = "".join(f"Prose about {n}.\n\n<!-- generated: measurements/{n}.json -->\nstale text\n<!-- end generated -->\n\n" for n in names)
    page.write_text(f"# Page\n\n{blocks}")
    return page


def write(tmp_path: Path, rec: dict) -> None:
    path = tmp_path / "docs" / "measurements" / f"{rec['name']}.json"
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(rec))


def generated(page: Path) -> str:
    return docs.generate(page.read_text(), page)


def test_the_command_of_a_record_leaves_out_where_the_record_went():
    argv = [str(ROOT / "bench/tta.py"), "--seeds", "3", "--record", "--record-dir", "/tmp/x", "--record-dir=/tmp/y"]
    assert record.command_line(argv) == "python bench/tta.py --seeds 3"
    assert record.shown_path(ROOT / "config/entries/fastnet.yaml") == "config/entries/fastnet.yaml"
    assert record.shown_path(ROOT.parent / "shared/dawnbench-entries") == "../shared/dawnbench-entries"


def test_a_missing_record_says_how_to_make_it(tmp_path):
    page = page_with(tmp_path, "tta", "page_load", "study-lesion-fastnet")
    text = generated(page)
    assert "Not measured yet: run `python bench/tta.py --record`, then `make docs`." in text
    assert "Not measured yet: run `python bench/page_load.py --record`" in text
    assert "run `python bench/studies.py lesion-fastnet --run --record` (it runs the study's Snakemake command first)" in text
    assert "stale text" not in text and text.count("<!-- end generated -->") == 3
    assert "Prose about tta." in text  # the hand-written prose is kept
    page.write_text(text)
    assert generated(page) == text  # a second generation changes nothing


TTA = {
    "threshold": 93.0,
    "seeds": 2,
    "train_limit": None,
    "test_limit": None,
    "threads": None,
    "fast": {
        "entry": "fastnet",
        "runs": [{"seed": 0, "reached": True, "time_to_accuracy_seconds": 56.04, "epochs_to_accuracy": 4.0}] * 2,
        "median_seconds": 56.04,
        "cov": 0.019,
        "reached_runs": 2,
        "runs_total": 2,
    },
    "seed_recipe": {
        "entry": "resnet20-dawn",
        "runs": [
            {"seed": 0, "reached": True, "time_to_accuracy_seconds": 720.31, "epochs_to_accuracy": 17.0},
            {"seed": 1, "reached": False, "time_to_accuracy_seconds": None, "epochs_to_accuracy": None},
        ],
        "median_seconds": 720.31,
        "cov": None,
        "reached_runs": 1,
        "runs_total": 2,
    },
    "speedup": 12.853,
}
OVERHEAD = {
    "entry": "config/entries/fastnet.yaml",
    "items": 12000,
    "epochs": 2,
    "repeats": 3,
    "threads": 2,
    "bare_seconds": [15.0, 14.6, 16.13],
    "pipeline_seconds": [15.11, 15.25, 15.49],
    "median_bare_seconds": 15.0,
    "median_pipeline_seconds": 15.25,
    "overhead": 1.0167,
}
LATENCY = {
    "checkpoint": "results/bench/fastnet-seed0/model.pt",
    "checkpoint_sha256": "ab" * 32,
    "threshold": 93.0,
    "items": 10000,
    "threads": 1,
    "warmup": 50,
    "rounds": 4,
    "max_accuracy_change": 0.1,
    "target": 3.0,
    "torch": "2.13.0+cpu",
    "load_average_before": [0.1, 0.1, 0.1],
    "load_average_after": [0.9, 0.3, 0.2],
    "backends": [
        {
            "backend": b,
            "precision": p,
            "accuracy": 93.42,
            "answers_differing_from_eager": d,
            **{f"latency_{k}_ms": v for k, v in zip(("mean", "p50", "p90", "p99", "max"), lat, strict=True)},
        }
        for b, p, d, lat in (
            ("eager", "fp32", 0, (1.6245, 1.4833, 2.0, 2.744, 9.1)),
            ("onnxruntime-int8", "int8", 6, (0.2966, 0.294, 0.31, 0.3397, 1.2)),
        )
    ],
    "best": "onnxruntime-int8",
    "speedup": 5.477,
    "best_fp32": None,
    "speedup_fp32": None,
}
AUDIT = {
    "entries": "../shared/dawnbench-entries",
    "submissions": 10000,
    "corpora": [
        {
            "corpus": "shared corpus",
            "files": 156,
            "repeats": 5,
            "wall_seconds_median": 0.82,
            "wall_seconds_min": 0.64,
            "cpu_seconds_median": 0.8,
            "exit_code": 0,
        }
    ],
    "shared_corpus_target_seconds": 1.5,
    "shared_corpus_verdict": "meets",
    "cpu_ms_per_file": {"small": 0.28, "large": 0.15},
    "files_per_second": 3571.4,
}
TELEMETRY = {
    "interval_seconds": 1.0,
    "tick": {"ticks": 300, "seconds_per_tick": 0.000151, "sources": {"process": "psutil"}, "core_fraction_at_interval": 0.000151},
    "entry": "config/entries/fastnet.yaml",
    "items": 3000,
    "epochs": 1,
    "repeats": 3,
    "threads": 2,
    "off_seconds": [4.0, 4.1, 4.2],
    "on_seconds": [4.05, 4.1, 4.15],
    "median_off_seconds": 4.1,
    "median_on_seconds": 4.1,
    "off_spread": 0.0488,
    "overhead": 1.0,
}

PROGRAM_OVERHEAD = {
    "entry": "config/entries/torch-fmnist.yaml",
    "items": 12000,
    "test_items": 2000,
    "epochs": 4,
    "threads": 2,
    "bare_seconds": [20.0, 21.0, 22.0],
    "harness_seconds": [21.5, 22.2, 22.9],
    "harness_export_seconds": [1.0, 1.0, 1.0],
    "harness_training_seconds": [20.5, 21.2, 21.9],
    "harness_dawnpipe_seconds": [21.6, 22.3, 23.0],
    "median_bare_seconds": 21.0,
    "median_harness_training_seconds": 21.2,
    "median_harness_export_seconds": 1.0,
    "repeats": 3,
    "pair_ratios": [1.025, 1.0095, 0.9955],
    "overhead": 1.0095,
    "interval": [None, None],
    "confidence": None,
    "precision_goal": 0.015,
    "overhead_with_export": 1.0571,
    "interval_with_export": [None, None],
    "goal": 1.03,
    "goal_verdict": "undecided",
}
STABILITY = {
    "entry": "torch-fmnist",
    "entry_file": "config/entries/torch-fmnist.yaml",
    "framework": "program",
    "threshold": 93.0,
    "seeds": 2,
    "train_limit": None,
    "test_limit": None,
    "threads": None,
    "runs": [
        {"seed": 0, "reached": True, "time_to_accuracy_seconds": 104.27, "epochs_to_accuracy": 4.0},
        {"seed": 1, "reached": False, "time_to_accuracy_seconds": None, "epochs_to_accuracy": None},
    ],
    "median_seconds": 104.27,
    "cov": None,
    "reached_runs": 1,
    "runs_total": 2,
}
PAGE_LOAD = {
    "runs": 1000,
    "repeats": 5,
    "chromium": "150.0",
    "goal_s": 2.0,
    "chart_goal_s": 1.0,
    "goal_met": False,
    "pages": {
        "1,000 runs": {"bytes": 3_562_152, "charts_in_window": 2, "median_load_event_s": 2.52, "median_charts_in_window_s": 2.61, "median_first_chart_s": 0.31}
    },
}


@pytest.mark.parametrize(
    "name, result, expected",
    [
        (
            "tta",
            TTA,
            ["| `fastnet` | 56.0, 56.0 | 56.0 s | 1.9% | 4, 4 | 2 of 2 |", "| `resnet20-dawn` | 720.3, - | 720.3 s | - | 17, - | 1 of 2 |", "**12.85x**"],
        ),
        ("overhead", OVERHEAD, ["| bare loop | 15.0, 14.6, 16.1 | 15.00 s |", "**1.017x**"]),
        ("latency", LATENCY, ["| `onnxruntime-int8` | int8 | 0.2966 | 0.2940 | 0.3100 | 0.3397 | 1.2000 | 93.42% | 6 |", "best `onnxruntime-int8`: **5.48x**"]),
        ("audit", AUDIT, ["| shared corpus | 156 | 0.820 (min 0.640, of 5) | 0.800 | 190 | 0 |", "**3,571 files/s**"]),
        ("telemetry_overhead", TELEMETRY, ["151 us over 300 ticks", "| on | 4.0, 4.1, 4.2 | 4.10 s |", "**1.000x**"]),
        (
            "program_overhead",
            PROGRAM_OVERHEAD,
            [
                "| through dawnpipe, training (its clock less the export) | 20.5, 21.2, 21.9 | 21.20 s |",
                "| through dawnpipe, the export of its weights (on its clock) | 1.0, 1.0, 1.0 | 1.00 s |",
                "**1.010x** (too few pairs for an interval); goal at most 1.03, decided by the interval: **undecided**. With the export of the weights counted, as the clock counts it: **1.057x**",
            ],
        ),
        (
            "program_overhead",
            {**PROGRAM_OVERHEAD, "overhead": 1.084, "interval": [1.05, 1.11], "confidence": 0.9297, "goal_verdict": "not met"},
            ["**1.084x** [1.050, 1.110] (93.0% interval); goal at most 1.03, decided by the interval: **not met**."],
        ),
        (
            "program_overhead",
            {
                **{k: PROGRAM_OVERHEAD[k] for k in ("entry", "items", "test_items", "epochs", "threads", "bare_seconds", "harness_seconds")},
                **{"harness_dawnpipe_seconds": [21.6, 22.3, 23.0], "median_bare_seconds": 21.0, "median_harness_seconds": 22.2, "overhead": 1.057},
            },  # a record of the bench before it ran in pairs
            ["| through dawnpipe (train stage) | 21.5, 22.2, 22.9 | 22.20 s |", "**1.057x**; no interval, no goal in this record."],
        ),
        ("stability-torch-fmnist", STABILITY, ["| 1 | did not reach | - |", "median **104.3 s**", "**1 of 2** seeds reached 93%"]),
        ("page_load", PAGE_LOAD, ["| 1,000 runs | 3.56 MB | 2.52 s | 2: 2.61 s | 0.31 s |", "): **not met**."]),
        ("something_new", {"a": 1, "b": [1, 2]}, ["| `a` | 1 |", "| `b` | [1, 2] |"]),
    ],
)
def test_a_record_renders_with_its_machine_commit_date_and_command(tmp_path, name, result, expected):
    write(tmp_path, a_record(name, result, f"python bench/{name}.py --seeds 2"))
    text = generated(page_with(tmp_path, name))
    assert (
        "Measured on Test CPU, 2 CPUs, 8 GiB, no GPU, Linux-test, Python 3.11.7, torch 2.13.0+cpu; at commit `0123456789ab`; "
        "2026-11-27T01:02:03+00:00; load average (1, 5, 15 min) 0.10 / 0.20 / 0.30 at the start, 1.50 (1 min) at the end; "
        f"by `python bench/{name}.py --seeds 2` (record: [measurements/{name}.json](measurements/{name}.json))." in text
    )
    for line in expected:
        assert line in text, f"{line!r} not in\n{text}"


def test_a_record_taken_on_a_busy_machine_says_so(tmp_path, monkeypatch):
    """record.write_record marks a measurement whose start saw a load above the ceiling, and the docs show it."""
    monkeypatch.setattr(record, "LOAD_AT_START", [5.0, 4.0, 3.0])
    path = record.write_record("overhead", OVERHEAD, out_dir=tmp_path, argv=["bench/overhead.py"])
    written = json.loads(path.read_text())
    assert written["quiet"] is False and written["load_ceiling"] == pytest.approx(record.LOAD_CEILING * (os.cpu_count() or 1))
    text = "\n".join(docs.provenance(written, "measurements/overhead.json"))
    assert "**Not a quiet machine:**" in text
    monkeypatch.setattr(record, "LOAD_AT_START", [0.0, 0.0, 0.0])
    monkeypatch.setattr(record, "foreign_cores", lambda: 0.0)  # nothing else ran (this suite's other workers do)
    calm = json.loads(record.write_record("overhead", OVERHEAD, out_dir=tmp_path, argv=["bench/overhead.py"]).read_text())
    assert calm["quiet"] is True and "Not a quiet machine" not in "\n".join(docs.provenance(calm, "measurements/overhead.json"))
    monkeypatch.setattr(record, "foreign_cores", lambda: 0.5)  # a calm start, then something else ran half a core
    busy_during = json.loads(record.write_record("overhead", OVERHEAD, out_dir=tmp_path, argv=["bench/overhead.py"]).read_text())
    assert busy_during["quiet"] is False and busy_during["foreign_cores"] == 0.5


def test_a_record_older_than_the_quiet_check_says_when_its_start_load_was_above_the_ceiling():
    """A record without the ``quiet`` field (written before the bench checked
    quietness) is flagged when its start load was above today's ceiling for its
    machine's cores; below it, or with the field, nothing is added."""
    old = {"machine": {"cpu_count": 2}, "commit": "a" * 40, "date": "2026-11-27", "command": "python bench/latency.py"}
    busy = "\n".join(docs.provenance({**old, "load_average": {"start": [1.82, 1.9, 1.8]}}, "measurements/latency.json"))
    assert (
        "**Quietness not checked:** this record predates the check; the load average at its start (1.82) was above today's ceiling of 1 (0.5 per core)" in busy
    )
    calm = "\n".join(docs.provenance({**old, "load_average": {"start": [0.61, 1.0, 1.0]}}, "measurements/latency.json"))
    assert "Quietness" not in calm and "Not a quiet machine" not in calm
    checked = "\n".join(docs.provenance({**old, "quiet": True, "load_average": {"start": [1.82, 1.9, 1.8]}}, "measurements/latency.json"))
    assert "Quietness" not in checked


def test_one_seed_shows_no_spread_rather_than_a_coefficient_of_zero():
    one = {"fast": {**TTA["fast"], "runs": TTA["fast"]["runs"][:1], "cov": 0.0, "reached_runs": 1, "runs_total": 1}}
    one["seed_recipe"] = {**TTA["seed_recipe"], "runs": TTA["seed_recipe"]["runs"][:1], "cov": 0.0, "runs_total": 1}
    text = "\n".join(docs.render_tta({"result": {**TTA, **one, "seeds": 1}}))
    assert "| `fastnet` | 56.0 | 56.0 s | - (one seed) | 4 | 1 of 1 |" in text and "0.0%" not in text
    assert "Seed 0; speed-up of the fast entry over the seed recipe (ratio of the medians): **12.85x**.\n" in text
    # one seed against one: no interval, so no decision on the speed-up, and no spread to judge
    assert text.endswith(
        "12.85x, no interval from 1 against 1 seed: **undecided**; a coefficient of variation of the fast entry's times "
        "of at most 5%: one seed has no spread: **not judged**."
    )


def _race(fast: list[float | None], slow: list[float | None], cov: float | None) -> dict:
    """A tta record's result with these per-seed times (None: never reached 93%)."""

    def entry(name: str, times: list[float | None], cov: float | None) -> dict:
        runs = [
            {"seed": i, "reached": t is not None, "time_to_accuracy_seconds": t, "epochs_to_accuracy": None if t is None else 4.0} for i, t in enumerate(times)
        ]
        return {**TTA["fast"], "entry": name, "runs": runs, "cov": cov, "reached_runs": sum(t is not None for t in times), "runs_total": len(times)}

    return {**TTA, "seeds": len(fast), "fast": entry("fastnet", fast, cov), "seed_recipe": entry("resnet20-dawn", slow, None)}


def test_the_race_goal_is_decided_by_the_interval_of_the_seeds():
    """The goal line is computed from the per-seed times by dawnpipe.verdict's
    rule: met when the whole 90% interval of the speed-up is above 10x, not met
    when none of it is, undecided otherwise; the spread as measured."""
    met = docs.tta_goal(_race([80, 81, 82, 83, 84], [1100, 1110, 1120, 1130, 1140], 0.02))
    assert "(90.5% interval, 5 against 5 seeds): **met**" in met and "2.0% over the 5 seeds that reached it: **met**" in met
    slow_fast = docs.tta_goal(_race([200, 201, 202, 203, 204], [1100, 1110, 1120, 1130, 1140], 0.06))
    assert "**not met**; " in slow_fast and "6.0% over the 5 seeds that reached it: **not met**" in slow_fast
    straddling = docs.tta_goal(_race([80, 100, 120, 140, 160], [1000, 1100, 1200, 1300, 1400], 0.3))
    assert "**undecided**; " in straddling
    # a seed recipe that never reached 93%: infinitely slow, the speed-up decided whatever the sizes
    never = docs.tta_goal(_race([80, 81], [None, None], 0.01))
    assert "the seed recipe reached 93% in none of its seeds, the other entry in every one (2 against 2 seeds): **met**" in never
    lost = docs.tta_goal(_race([None, None], [1100, 1110], None))
    assert "the fast entry reached 93% in none of its seeds" in lost and "**not met**" in lost
    assert "fewer than two seeds reached the threshold: **not judged**" in lost


def test_check_mode_names_a_stale_page_and_writes_nothing(tmp_path, capsys):
    page = page_with(tmp_path, "tta")
    before = page.read_text()
    assert docs.main(["--check", "--docs", str(page.parent)]) == 1
    assert page.read_text() == before and "page.md" in capsys.readouterr().err
    assert docs.main(["--docs", str(page.parent)]) == 0
    assert docs.main(["--check", "--docs", str(page.parent)]) == 0


def fabricated_study(results: Path, monkeypatch) -> dict:
    """results/studies/test-batch.json as the study stage writes it (its own
    summarize, over made-up runs), and a run.json for every run."""
    from dawnpipe.report import study as study_stage
    from dawnpipe.studies import load_study

    study = load_study(ROOT / "config/studies/test-batch.yaml", ROOT / "config/entries/smoke")

    def run_record(run_dir: Path, task, ladder):
        seed = int(run_dir.name.removeprefix("seed"))
        batch = int(run_dir.parent.name.split("=")[-1]) if "batch=" in run_dir.parent.name else 64
        hours = {str(t): (None if (batch == 128 and t == 70.0 and seed == 1) else (10 + t / 10 + seed) / 3600 * 64 / batch) for t in ladder}
        return {
            "seed": seed,
            "time_to_accuracy_hours": hours,
            "epochs_to_accuracy": {t: (None if h is None else 3.0) for t, h in hours.items()},
            "final_accuracy": 71.5 + seed,
            "final_held_out_accuracy": None,
            "epochs_run": 4,
            "items_per_second": 1000.0 * batch / 64,
            "seconds_per_epoch": 5.0 * 64 / batch,
            "hardware": "local-cpu",
            "nodes": 1,
            "world_size": 1,
            "threads_per_process": 2,
            "curve": {"hours": [], "metric": [], "train_loss": []},
        }

    monkeypatch.setattr(study_stage, "run_record", run_record)
    summary = study_stage.summarize(study, results / "runs")
    doc = {**summary, "variants": [{**v, "runs": [{k: x for k, x in r.items() if k != "curve"} for r in v["runs"]]} for v in summary["variants"]]}
    (results / "studies").mkdir(parents=True)
    (results / "studies" / "test-batch.json").write_text(json.dumps(doc))
    for v in doc["variants"]:
        for r in v["runs"]:
            run = results / "runs" / (v["same_as"] or v["id"]) / f"seed{r['seed']}"
            run.mkdir(parents=True, exist_ok=True)
            commit = "a" * 40 if r["seed"] == 0 else "b" * 40
            (run / "run.json").write_text(
                json.dumps(
                    {
                        "entry": v["id"],
                        "seed": r["seed"],
                        "task": "fashion-mnist",
                        "model": "fastnet",
                        "framework": "pytorch",
                        "hardware": "local-cpu",
                        "threshold": 70.0,
                        "official_threshold": 93.0,
                        "demo_threshold": True,
                        "config_hash": "x",
                        "started": f"2026-11-26T0{r['seed']}:00:00+00:00",
                        "finished": f"2026-11-26T0{r['seed']}:05:00+00:00",
                        "world_size": 1,
                        "threads_per_process": 2,
                        "environment": {
                            "cpu_model": "Test CPU",
                            "cpu_count": 2,
                            "platform": "Linux-test",
                            "python": "3.11.7",
                            "framework": "pytorch",
                            "framework_version": "2.13.0+cpu",
                            "device": "cpu",
                            "threads": 2,
                            "git": {"commit": commit, "dirty": False},
                        },
                    }
                )
            )
    return doc


def test_a_study_record_keeps_the_claim_the_variants_and_its_runs_machines_and_commits(tmp_path, monkeypatch):
    results = tmp_path / "results"
    doc = fabricated_study(results, monkeypatch)
    rec = studies.study_record("test-batch", results)
    assert rec["claim"] == "a larger batch gives more items per second" and rec["ladder"] == [50.0, 60.0, 70.0]
    assert rec["made_by"] == "snakemake --cores all results/studies/test-batch.html --configfile config/test-study.yaml"
    assert [v["id"] for v in rec["variants"]] == [v["id"] for v in doc["variants"]]
    assert {(c["commit"], c["runs"]) for c in rec["runs"]["commits"]} == {("a" * 40, 4), ("b" * 40, 4)}
    assert rec["runs"]["machines"] == [
        {
            "cpu_model": "Test CPU",
            "cpu_count": 2,
            "platform": "Linux-test",
            "python": "3.11.7",
            "framework": "pytorch",
            "framework_version": "2.13.0+cpu",
            "device": "cpu",
            "runs": 8,
        }
    ]
    assert rec["runs"]["first_started"] == "2026-11-26T00:00:00+00:00" and rec["runs"]["last_finished"] == "2026-11-26T01:05:00+00:00"

    out = tmp_path / "docs" / "measurements"
    assert studies.main(["test-batch", "--results", str(results), "--record", "--record-dir", str(out)]) == 0
    written = json.loads((out / "study-test-batch.json").read_text())
    assert written["command"] == f"python bench/studies.py test-batch --results {results}"
    text = generated(page_with(tmp_path, "study-test-batch"))
    assert (
        "Runs made by `snakemake --cores all results/studies/test-batch.html --configfile config/test-study.yaml`, "
        "between 2026-11-26T00:00:00+00:00 and 2026-11-26T01:05:00+00:00, at `aaaaaaaaaaaa` (4 runs); `bbbbbbbbbbbb` (4 runs); "
        "on Test CPU, 2 CPUs, Linux-test, Python 3.11.7, pytorch 2.13.0+cpu, cpu (8 runs)." in text
    )
    base = next(line for line in text.splitlines() if line.startswith("| `smoke-fastnet` |"))
    assert base == "| `smoke-fastnet` | 15.5 (2 of 2) | 16.5 (2 of 2) | 17.5 (2 of 2) | 1.00x | 3, 3 | 5.0 | 1,000 | 71.50, 72.50 |"
    batch32 = next(line for line in text.splitlines() if line.startswith("| `smoke-fastnet+batch=32` |"))
    assert batch32 == "| `smoke-fastnet+batch=32` | 31.0 (2 of 2) | 33.0 (2 of 2) | 35.0 (2 of 2) | 0.50x | 3, 3 | 10.0 | 500 | 71.50, 72.50 |"
    batch128 = next(line for line in text.splitlines() if line.startswith("| `smoke-fastnet+batch=128` |"))
    assert "| never (1 of 2) | - | 3, - |" in batch128, batch128  # seed 1 never reached 70%: no median of two


def test_the_default_data_is_made_by_the_pipeline_and_other_paths_are_not(tmp_path, monkeypatch):
    calls = []

    def fake_run(command, cwd, env):
        calls.append((command, cwd))
        (inputs.DATA / "fashion-mnist").mkdir(parents=True, exist_ok=True)
        (inputs.DATA / "fashion-mnist" / "manifest.json").write_text("{}")
        return subprocess.CompletedProcess(command, 0)

    monkeypatch.setattr(inputs, "DATA", tmp_path / "data" / "prepared")
    monkeypatch.setattr(inputs.subprocess, "run", fake_run)
    with pytest.raises(DawnpipeError, match="no prepared data for task fashion-mnist; leave out --data"):
        inputs.ensure_prepared(tmp_path / "mine")
    assert calls == []
    assert inputs.ensure_prepared(inputs.DATA / "fashion-mnist") == inputs.DATA / "fashion-mnist"
    ((command, cwd),) = calls
    assert command[1:] == ["--cores", "all", "data/prepared/fashion-mnist"] and Path(command[0]).name == "snakemake" and cwd == ROOT
    assert inputs.ensure_prepared(inputs.DATA / "fashion-mnist") and len(calls) == 1  # there now: nothing runs
