"""Studies (dawnpipe.studies, dawnpipe study): the schema and its one-line
errors, variant generation (stable ids, duplicates run once, overrides
applied, the learning rate scaled), the pipeline's view of them (Snakemake and
DVC), and the tiny study end to end, its medians and speed-ups recomputed here
from the runs' own time_to_accuracy.json."""

from __future__ import annotations

import json
import statistics

import pytest
import yaml
from conftest import ROOT, copy_project, run_cli, run_snakemake

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
    assert set(train) == {f"{e}-{s}" for e in ("smoke-fastnet", "smoke-fastnet+batch=32", "smoke-fastnet+batch=128") for s in (0, 1)}
    item = train["smoke-fastnet+batch=32-0"]
    assert "--entry 'config/studies/test-batch.yaml#smoke-fastnet+batch=32'" in item["cmd"] and "--stop-at-threshold" not in item["cmd"]
    assert "--entries-dir config/entries/smoke" in item["cmd"]
    assert list(stages["study"]["foreach"]) == ["test-batch"]


@pytest.mark.slow
def test_the_tiny_study_end_to_end(tmp_path):
    project = copy_project(tmp_path / "p")
    ran = ["smoke-fastnet", "smoke-fastnet+batch=32", "smoke-fastnet+batch=128"]
    tta_files = [f"results/runs/{e}/seed{s}/time_to_accuracy.json" for e in ran for s in (0, 1)]
    run_snakemake(project, "--cores", "2", "results/studies/test-batch.html", *tta_files, "--configfile", "config/test-study.yaml")
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
    html = (project / "results/studies/test-batch.html").read_text()
    assert "smoke-fastnet+batch=128" in html and "<svg" in html and "run once" in html
    for run_json in (project / "results/runs").glob("*/seed*/run.json"):  # whole curves: every run went on past the threshold
        run = json.loads(run_json.read_text())
        assert run["settings"]["stop_at_threshold"] is False and run["result"]["epochs_run"] == 2
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


@pytest.mark.parametrize("path", sorted((ROOT / "config/studies").glob("*.yaml")), ids=lambda p: p.stem)
def test_every_ready_made_study_loads_and_its_variants_are_valid_entries(path):
    from dawnpipe.entries import validate_entry

    entries = SMOKE if path.stem.startswith("test-") else ROOT / "config/entries"
    study = load_study(path, entries)
    assert study.variants and len({v.id for v in study.variants}) == len(study.variants)
    for v in study.runnable():
        validate_entry({k: x for k, x in v.recipe.items() if k != "id"}, f"{path}#{v.id}")  # the task's rules and its model family's model_args
