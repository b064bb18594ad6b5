"""Studies (dawnpipe.studies, dawnpipe study): the schema and its one-line
errors, variant generation (stable ids, duplicates run once, overrides
applied, the learning rate scaled), the pipeline's view of them (Snakemake and
DVC), and the tiny study end to end, its medians and speed-ups recomputed here
from the runs' own time_to_accuracy.json."""

from __future__ import annotations

import json
import statistics
from pathlib import Path

import pandas as pd
import pytest
import yaml
from conftest import ROOT, chart_specs, copy_project, run_cli, run_snakemake

from dawnpipe.errors import DawnpipeError
from dawnpipe.studies import load_entry_ref, load_study


def write(tmp_path, doc, name="s.yaml"):
    path = tmp_path / name
    path.write_text(yaml.safe_dump(doc))
    return path


BASE = {"base": "smoke-fastnet", "seeds": [0], "ladder": [80.0]}
SMOKE = ROOT / "config/entries/smoke"


def test_variants_of_each_design_have_stable_readable_ids(tmp_path):
    over = {"a": {"x": {"hyperparameters.batch_size": 32}, "y": {"hyperparameters.batch_size": 128}}, "opt": {"adam": {"hyperparameters.optimizer": "adam"}}}
    one = load_study(write(tmp_path, {**BASE, "design": "one-at-a-time", "factors": over}), SMOKE)
    assert [v.id for v in one.variants] == ["smoke-fastnet+a=x", "smoke-fastnet+a=y", "smoke-fastnet+opt=adam"]
    fact = load_study(write(tmp_path, {**BASE, "design": "factorial", "factors": over}), SMOKE)
    assert [v.id for v in fact.variants] == ["smoke-fastnet+a=x+opt=adam", "smoke-fastnet+a=y+opt=adam"]
    assert fact.variants[0].recipe["hyperparameters"]["batch_size"] == 32 and fact.variants[0].recipe["hyperparameters"]["optimizer"] == "adam"
    tricks = {"flip": {"hyperparameters.augment.flip": False}, "nesterov": {"hyperparameters.nesterov": False}}
    lesion = load_study(write(tmp_path, {**BASE, "design": "lesion", "tricks": tricks}), SMOKE)
    assert [v.id for v in lesion.variants] == ["smoke-fastnet-flip", "smoke-fastnet-nesterov"]
    assert lesion.variants[0].recipe["hyperparameters"]["augment"]["flip"] is False
    combo = load_study(write(tmp_path, {**BASE, "design": "combination", "tricks": tricks}), SMOKE)
    assert [v.id for v in combo.variants] == ["smoke-fastnet+flip", "smoke-fastnet+nesterov", "smoke-fastnet+all"]
    both = combo.variants[-1].recipe["hyperparameters"]
    assert both["augment"]["flip"] is False and both["nesterov"] is False
    # the same file gives the same ids and recipes again
    again = load_study(write(tmp_path, {**BASE, "design": "combination", "tricks": tricks}), SMOKE)
    assert [(v.id, v.recipe) for v in again.variants] == [(v.id, v.recipe) for v in combo.variants]


def test_a_variant_equal_to_the_base_or_another_runs_once_and_the_rule_scales_the_rate():
    study = load_study(ROOT / "config/studies/test-batch.yaml", SMOKE)
    by_id = {v.id: v for v in study.variants}
    assert by_id["smoke-fastnet+batch=64"].same_as == "smoke-fastnet"  # the base's own batch
    assert [v.id for v in study.runnable()] == ["smoke-fastnet+batch=32", "smoke-fastnet+batch=128"]
    base_lr = study.base_recipe["hyperparameters"]["lr"]
    assert by_id["smoke-fastnet+batch=128"].recipe["hyperparameters"]["lr"] == pytest.approx(2 * base_lr)
    assert by_id["smoke-fastnet+batch=32"].recipe["hyperparameters"]["lr"] == pytest.approx(base_lr / 2)
    batch = load_study(ROOT / "config/studies/batch-size.yaml", ROOT / "config/entries")
    v512 = next(v for v in batch.variants if v.id == "resnet20-short+batch=512")
    hp = v512.recipe["hyperparameters"]
    assert hp["lr"] == pytest.approx(0.4) and hp["schedule"]["warmup_lr"] == pytest.approx(0.04) and hp["schedule"]["warmup_epochs"] == 2
    # an entry reference reads the same recipe the study gives
    assert load_entry_ref(f"{ROOT}/config/studies/test-batch.yaml#smoke-fastnet+batch=32", SMOKE) == by_id["smoke-fastnet+batch=32"].recipe


@pytest.mark.parametrize(
    "change, message",
    [
        ({"design": "diagonal"}, "field 'design'"),
        ({"design": "one-at-a-time", "factors": {"a": {"x": {"hyperparameters.batch_size": 32}}}, "colour": 1}, "colour"),
        ({"design": "lesion"}, "field 'tricks': the lesion design needs at least one"),
        # train --seed takes 0 .. 2**32 - 1: a larger seed is the study's error, not the train job's
        ({"design": "lesion", "tricks": {"t": {"hyperparameters.nesterov": False}}, "seeds": [0, 2**32]}, "field 'seeds.1': expected a number <= 4294967295"),
        ({"design": "one-at-a-time", "factors": {"a": {"x y": {"hyperparameters.batch_size": 32}}}}, "field 'factors.a'"),
        ({"design": "one-at-a-time", "base": "nope", "factors": {"a": {"x": {"hyperparameters.batch_size": 32}}}}, "field 'base': no entry 'nope'"),
        (
            {"design": "one-at-a-time", "factors": {"a": {"x": {"hyperparameters.batch_size": "big"}}}},
            "variant smoke-fastnet+a=x: field 'hyperparameters.batch_size'",
        ),
    ],
)
def test_a_bad_study_is_one_line_naming_the_field(tmp_path, change, message):
    path = write(tmp_path, {**BASE, **change})
    proc = run_cli("study", "variants", str(path), "--entries-dir", str(SMOKE))
    assert proc.returncode == 1 and "Traceback" not in proc.stderr, proc.stderr
    assert len(proc.stderr.strip().splitlines()) == 1 and message in proc.stderr and str(path) in proc.stderr, proc.stderr


def test_dvc_runs_the_study_stages_and_variants_from_the_study_file(tmp_path):
    project = copy_project(tmp_path / "p")
    run_cli("pipeline", "dvc", "--config", "config/test-study.yaml", cwd=project, check=True)
    stages = yaml.safe_load((project / "dvc.yaml").read_text())["stages"]
    train = stages["train"]["foreach"]
    batch = {f"{e}-{s}" for e in ("smoke-fastnet", "smoke-fastnet+batch=32", "smoke-fastnet+batch=128") for s in (0, 1)}
    # test-threads (seed 0); its global_batch=128 is test-batch's batch=128 under another id: no stage of its own
    assert set(train) == batch | {"smoke-fastnet+threads=1-0", "smoke-fastnet+processes=2-0"}
    item = train["smoke-fastnet+batch=32-0"]
    assert "--entry 'config/studies/test-batch.yaml#smoke-fastnet+batch=32'" in item["cmd"] and "--stop-at-threshold" not in item["cmd"]
    assert "--entries-dir config/entries/smoke" in item["cmd"]
    assert list(stages["study"]["foreach"]) == ["test-batch", "test-threads"]
    assert "--same-as smoke-fastnet+global_batch=128 smoke-fastnet+batch=128" in stages["study"]["foreach"]["test-threads"]["cmd"]
    assert "--same-as" not in stages["study"]["foreach"]["test-batch"]["cmd"]


@pytest.mark.slow
def test_the_tiny_study_end_to_end(tmp_path):
    project = copy_project(tmp_path / "p")
    ran = ["smoke-fastnet", "smoke-fastnet+batch=32", "smoke-fastnet+batch=128"]
    tta_files = [f"results/runs/{e}/seed{s}/time_to_accuracy.json" for e in ran for s in (0, 1)]
    pages = ["results/studies/test-batch.html", "results/studies/test-threads.html"]
    run_snakemake(project, "--cores", "2", *pages, *tta_files, "--configfile", "config/test-study.yaml")
    doc = json.loads((project / "results/studies/test-batch.json").read_text())
    assert [v["id"] for v in doc["variants"]] == ["smoke-fastnet", "smoke-fastnet+batch=32", "smoke-fastnet+batch=64", "smoke-fastnet+batch=128"]
    assert not (project / "results/runs/smoke-fastnet+batch=64").exists()  # the same recipe as the base: run once
    medians = {}
    for v in doc["variants"]:
        ran = v["same_as"] or v["id"]
        tta = [json.loads((project / f"results/runs/{ran}/seed{s}/time_to_accuracy.json").read_text()) for s in (0, 1)]
        assert all(t["reached"] for t in tta)  # the rung at the runs' threshold is the extract stage's time
        hours = sorted(t["time_to_accuracy_hours"] for t in tta)
        medians[v["id"]] = statistics.median(hours)
        # time_to_accuracy.json stores hours to 1e-11 (a microsecond); the study reads the unrounded log
        assert v["median_time_to_accuracy_hours"]["70.0"] == pytest.approx(medians[v["id"]], abs=1e-9)
    for v in doc["variants"]:
        assert v["speedup"]["70.0"] == pytest.approx(medians["smoke-fastnet"] / medians[v["id"]], rel=1e-5)
        # seconds per epoch: the median over seeds of each run's median epoch (train.parquet's training clock);
        # cost: the median time x the price the extract stage used (time_to_accuracy.json's usd_per_hour)
        ran = v["same_as"] or v["id"]
        logs = [pd.read_parquet(project / f"results/runs/{ran}/seed{s}/train.parquet") for s in (0, 1)]
        assert v["median_seconds_per_epoch"] == pytest.approx(statistics.median(statistics.median(log["epoch_train_seconds"]) for log in logs))
        price = json.loads((project / f"results/runs/{ran}/seed0/time_to_accuracy.json").read_text())["usd_per_hour"]
        assert price and v["median_cost_to_accuracy_usd"]["70.0"] == pytest.approx(medians[v["id"]] * price, rel=1e-6)
    assert doc["figure"] == "batch-size"  # three batch sizes
    # its one check on two seeds a variant: inconclusive by the rule, whatever the runs did
    (verdict,) = doc["verdicts"]
    assert verdict["verdict"] == "inconclusive" and verdict["seeds"] == [2, 2] and verdict["low"] is None
    assert verdict["reason"] == "2 against 2 seeds: no interval (the fewest is 3 against as many)"
    # test-threads varies threads and the layout: the scaling figure, drawn from its real runs
    threads_doc = json.loads((project / "results/studies/test-threads.json").read_text())
    threads_page = (project / "results/studies/test-threads.html").read_text()
    assert threads_doc["figure"] == "scaling" and "Speed-up per epoch against speed-up to" in threads_page
    assert all(v["median_seconds_per_epoch"] and v["epoch_speedup"] for v in threads_doc["variants"])
    html = (project / "results/studies/test-batch.html").read_text()
    assert "smoke-fastnet+batch=128" in html and 'class="chart-data"' in html and "run once" in html
    assert '<tr class="verdict inconclusive"><td>batch 128 gives more items per second' in html
    assert "states its claim in words only" in threads_page  # test-threads has no checks
    # curves: test-threads' variant run as test-batch's batch=128 has its own on its own page (accuracy and
    # loss); test-batch's batch=64, the base's recipe, is drawn once, as the base
    threads_curves = [{t["name"] for t in spec["data"]} for spec in chart_specs(threads_page)[:2]]
    assert all("smoke-fastnet+global_batch=128 seed 0" in names for names in threads_curves), threads_curves
    batch_curves = {t["name"] for t in chart_specs(html)[0]["data"]}
    assert {"smoke-fastnet seed 0", "smoke-fastnet+batch=128 seed 1"} <= batch_curves and not any("batch=64" in n for n in batch_curves)
    for run_json in (project / "results/runs").glob("*/seed*/run.json"):  # whole curves: every run went on past the threshold
        run = json.loads(run_json.read_text())
        assert run["settings"]["stop_at_threshold"] is False and run["result"]["epochs_run"] == 2
    check_threads_and_processes(project, doc)
    # the leaderboard links the study: its page, its claim and its fastest variant to the top rung
    out = project / "results"
    runs = [str(project / f"results/runs/{e}") for e in ("smoke-fastnet", "smoke-fastnet+batch=32", "smoke-fastnet+batch=128")]
    run_cli(
        "report",
        "--runs",
        *runs,
        "--studies",
        str(out / "studies/test-batch.json"),
        "--json",
        str(out / "lb.json"),
        "--html",
        str(out / "lb.html"),
        "--table",
        str(out / "runs.parquet"),
        "--csv",
        str(out / "runs.csv"),
        check=True,
    )
    page = (out / "lb.html").read_text()
    section = page[page.index('id="studies"') :]
    section = section[: section.index("</table>")]
    best = max(doc["variants"][1:], key=lambda v: v["speedup"]["70.0"])
    assert 'href="studies/test-batch.html"' in section and f"{best['speedup']['70.0']:.2f}x" in section
    assert "<td>1 inconclusive</td>" in section


def check_threads_and_processes(project, batch_doc):
    """test-threads, run beside test-batch on 2 cores (--cores 2): each run's
    run.json says the threads and processes it used, the study JSON carries
    them, and its variant equal to test-batch's batch=128 ran once, both
    studies reading that run directory."""
    run = {
        e: json.loads((project / f"results/runs/{e}/seed0/run.json").read_text())
        for e in ("smoke-fastnet", "smoke-fastnet+threads=1", "smoke-fastnet+processes=2")
    }
    # the job's share: 2 cores for one process; the entry's 1; 2 processes halve the share
    expected = {"smoke-fastnet": (1, 2, "job"), "smoke-fastnet+threads=1": (1, 1, "entry"), "smoke-fastnet+processes=2": (2, 1, "job")}
    for e, (processes, threads, source) in expected.items():
        r = run[e]
        assert (r["processes"], r["world_size"], r["threads_per_process"], r["threads_from"]) == (processes, processes, threads, source), e
        assert r["environment"]["threads"] == threads, e  # what the framework reported in the (first) process
    doc = json.loads((project / "results/studies/test-threads.json").read_text())
    by_id = {v["id"]: v for v in doc["variants"]}
    assert list(by_id) == ["smoke-fastnet", "smoke-fastnet+threads=1", "smoke-fastnet+processes=2", "smoke-fastnet+global_batch=128"]
    for e, (processes, threads, _) in expected.items():
        (r,) = by_id[e]["runs"]
        assert (r["world_size"], r["threads_per_process"]) == (processes, threads), e
    shared = by_id["smoke-fastnet+global_batch=128"]
    assert shared["same_as"] == "smoke-fastnet+batch=128" and not (project / "results/runs/smoke-fastnet+global_batch=128").exists()
    theirs = next(v for v in batch_doc["variants"] if v["id"] == "smoke-fastnet+batch=128")["runs"][0]  # seed 0
    tta = json.loads((project / "results/runs/smoke-fastnet+batch=128/seed0/time_to_accuracy.json").read_text())
    assert shared["runs"][0]["time_to_accuracy_hours"] == theirs["time_to_accuracy_hours"]
    assert shared["runs"][0]["time_to_accuracy_hours"]["70.0"] == pytest.approx(tta["time_to_accuracy_hours"], abs=1e-9)


@pytest.mark.parametrize("path", sorted((ROOT / "config/studies").glob("*.yaml")), ids=lambda p: p.stem)
def test_every_ready_made_study_loads_and_its_variants_are_valid_entries(path):
    from dawnpipe.entries import validate_entry

    entries = SMOKE if path.stem.startswith("test-") else ROOT / "config/entries"
    study = load_study(path, entries)
    assert study.variants and len({v.id for v in study.variants}) == len(study.variants)
    for v in study.runnable():
        validate_entry({k: x for k, x in v.recipe.items() if k != "id"}, f"{path}#{v.id}")  # the task's rules and its model family's model_args


def study_plan(project, monkeypatch, **config):
    """The Plan of config/test-study.yaml in ``project``, with ``config`` laid over it."""
    from dawnpipe.pipeline.config import resolve
    from dawnpipe.pipeline.plan import Plan

    monkeypatch.chdir(project)
    return Plan(resolve(["config/test-study.yaml"], config or None, root=project))


def test_equal_recipes_run_once_across_studies_and_entries(tmp_path, monkeypatch):
    project = copy_project(tmp_path / "p")
    plan = study_plan(project, monkeypatch)
    # test-threads' global_batch=128 is test-batch's batch=128 (the same base, batch and scaled rate)
    assert "smoke-fastnet+global_batch=128" not in plan.entries and plan.entries["smoke-fastnet+batch=128"].seeds == (0, 1)
    assert plan.shared_runs("test-threads") == {"smoke-fastnet+global_batch=128": "smoke-fastnet+batch=128"}
    assert plan.shared_runs("test-batch") == {}  # its batch=64 = the base: the study file says so itself
    assert "results/runs/smoke-fastnet+batch=128/seed0" in plan.study_runs("test-threads")
    # an entry of the configuration with that recipe (another id, description and comments): both variants run as it
    text = (project / "config/entries/smoke/smoke-fastnet.yaml").read_text()
    entry = (
        text.replace("batch_size: 64 ", "batch_size: 128 ")
        .replace("lr: 0.2 ", "lr: 0.4 ")
        .replace("description: ResNet-9", "description: wide batch, ResNet-9")
    )
    # the scaling rule doubles the (default) warm-up rate too, unused by a one-cycle schedule but part of the recipe
    entry = entry.replace("    kind: onecycle\n", "    kind: onecycle\n    warmup_lr: 0.02\n")
    assert entry.count("128") == 1 and entry.count("0.4") == 1 and entry.count("0.02") == 1
    (project / "config/entries/smoke/smoke-b128.yaml").write_text("# a plain entry\n" + entry)
    plan = study_plan(project, monkeypatch, entries=["smoke-b128"])
    assert not {"smoke-fastnet+batch=128", "smoke-fastnet+global_batch=128"} & set(plan.entries)
    assert plan.entries["smoke-b128"].seeds == (0, 1) and plan.entries["smoke-b128"].full_budget  # the studies' seeds and whole curves
    assert plan.shared_runs("test-batch") == {"smoke-fastnet+batch=128": "smoke-b128"}
    assert plan.shared_runs("test-threads") == {"smoke-fastnet+global_batch=128": "smoke-b128"}
    # the ids a study reports stay what its file says, whatever else the configuration holds
    assert [v.id for v in plan.studies["test-batch"].variants] == [v.id for v in load_study(project / "config/studies/test-batch.yaml", SMOKE).variants]
    # the summary reads the shared run directory: the study command passes the pairs, load_study applies them
    study = load_study(project / "config/studies/test-batch.yaml", SMOKE, {"smoke-fastnet+batch=128": "smoke-b128"})
    assert {v.id: v.same_as for v in study.variants}["smoke-fastnet+batch=128"] == "smoke-b128"
    with pytest.raises(DawnpipeError, match="no variant 'nope'"):
        load_study(project / "config/studies/test-batch.yaml", SMOKE, {"nope": "smoke-b128"})


def test_the_configs_study_seeds_replace_every_studys_own(tmp_path, monkeypatch):
    """A machine too small for the study files' seeds: config key study_seeds
    runs and reads those instead, and the study's JSON says whose seeds they are."""
    project = copy_project(tmp_path / "p")
    plan = study_plan(project, monkeypatch, study_seeds=[3])
    assert {e.id: e.seeds for e in plan.entries.values()} == dict.fromkeys(plan.entries, (3,)) and len(plan.entries) == 5
    assert all(d.endswith("/seed3") for name in plan.studies for d in plan.study_runs(name))
    assert plan.studies["test-batch"].file_seeds == [0, 1] and plan.studies["test-threads"].file_seeds == [0]
    (project / "config/seeds3.yaml").write_text("study_seeds: [3]\n")
    run_cli("pipeline", "dvc", "--config", "config/test-study.yaml", "--config", "config/seeds3.yaml", cwd=project, check=True)
    stages = yaml.safe_load((project / "dvc.yaml").read_text())["stages"]
    assert {k.rsplit("-", 1)[1] for k in stages["train"]["foreach"]} == {"3"}
    assert all(" --seeds 3 --json " in item["cmd"] for item in stages["study"]["foreach"].values())
    # the summary reads the config's seeds and says the study file asked for others: the Slurm study test (tests/test_slurm.py)


def test_a_variant_reruns_exactly_when_its_resolved_recipe_changes(tmp_path, monkeypatch):
    """Snakemake's rerun value of a variant's train job and DVC's params file
    of it (its resolved recipe, written by `dawnpipe pipeline dvc`) change
    together: with a value of the base entry (every variant), with one
    variant's overrides (that one), never with a comment; a ladder edit
    summarizes again and retrains nothing."""
    from dawnpipe.pipeline import render
    from dawnpipe.pipeline.dvc import generated_files
    from dawnpipe.pipeline.stages import STUDY, TRAIN

    project = copy_project(tmp_path / "p")
    variants = ["smoke-fastnet+batch=32", "smoke-fastnet+batch=128", "smoke-fastnet+threads=1", "smoke-fastnet+processes=2"]

    def state():
        plan = study_plan(project, monkeypatch)
        files = generated_files(plan.config)
        train = {v: render.values_hash(TRAIN, plan, {"entry": v, "seed": "0"}) for v in variants}
        recipes = {v: files[Path(plan.entries[v].params_file)] for v in variants}
        assert {v: render.dvc_params(TRAIN, plan, {"entry": v, "seed": "0"}) for v in variants} == {v: [(f"dvc-variants/{v}.yaml", None)] for v in variants}
        return train, recipes, render.values_hash(STUDY, plan, {"study": "test-batch"})

    def edit(path, old, new):
        text = (project / path).read_text()
        assert text.count(old) == 1, (path, old)
        (project / path).write_text(text.replace(old, new))

    def changed(before, after):
        return {v for v in variants if before[0][v] != after[0][v]}, {v for v in variants if before[1][v] != after[1][v]}, before[2] != after[2]

    start = state()
    assert yaml.safe_load(start[1]["smoke-fastnet+batch=32"])["hyperparameters"]["batch_size"] == 32  # the resolved recipe
    edit("config/entries/smoke/smoke-fastnet.yaml", "# Smoke-test size", "# A comment edit. Smoke-test size")
    edit("config/studies/test-batch.yaml", "# The tiny study", "# A comment edit. The tiny study")
    assert changed(start, state()) == (set(), set(), False)
    edit("config/entries/smoke/smoke-fastnet.yaml", "weight_decay: 0.0005 ", "weight_decay: 0.001 ")
    base_edit = state()
    assert changed(start, base_edit) == (set(variants), set(variants), False)
    edit("config/studies/test-batch.yaml", '"32": {hyperparameters.batch_size: 32}', '"32": {hyperparameters.batch_size: 32, hyperparameters.nesterov: false}')
    one = state()
    assert changed(base_edit, one) == ({"smoke-fastnet+batch=32"}, {"smoke-fastnet+batch=32"}, True)
    edit("config/studies/test-batch.yaml", "ladder: [50.0, 60.0, 70.0]", "ladder: [50.0, 65.0, 70.0]")
    assert changed(one, state()) == (set(), set(), True)
