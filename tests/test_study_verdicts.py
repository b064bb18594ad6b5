"""A study's verdicts end to end on runs the test builds: real run
directories (train.parquet and run.json as the train stage writes them,
tests/submission_factory.py, run_dir), the study stage's `dawnpipe study
summarize`, its JSON and page, bench/studies.py's record and
docs/studies.md's verdict line computed again from the record's runs (also
for a record made before studies had checks). Each of the three verdicts,
the categorical one, a check's one-line errors, and a one-seed study that is
inconclusive unless a rung is never reached."""

from __future__ import annotations

import importlib.util
import json
import sys

import pandas as pd
import pytest
import yaml
from conftest import ROOT, run_cli
from submission_factory import run_dir

SMOKE = ROOT / "config/entries/smoke"
BASE = "smoke-fastnet"

spec = importlib.util.spec_from_file_location("docs_generator", ROOT / "scripts/docs.py")
docs = importlib.util.module_from_spec(spec)
spec.loader.exec_module(docs)
sys.path.insert(0, str(ROOT / "bench"))
import studies as bench_studies  # noqa: E402

# Epoch hours of each seed's run: the time to 80% is the hours of the epoch that reaches it.
TSV = "epoch\thours\ttop1Accuracy\n1\t{a}\t72.0\n2\t{b}\t{acc}\n"


def tsv(hours_to_80: float | None, final: float = 85.0) -> str:
    """A two-epoch log reaching 80% at epoch 2 after ``hours_to_80`` hours (None: never, ending at 78%)."""
    if hours_to_80 is None:
        return TSV.format(a=0.001, b=0.002, acc=78.0)
    return TSV.format(a=hours_to_80 / 2, b=hours_to_80, acc=final)


# seconds to 80% per seed (None: never reaches it)
SECONDS = {
    BASE: [10.0, 11.0, 12.0],
    f"{BASE}+batch=32": [5.0, 5.5, 6.0],  # every pair faster: the whole interval above 1x
    f"{BASE}+batch=128": [20.0, 22.0, 24.0],  # every pair slower: none of it above 1x
    f"{BASE}+batch=256": [5.0, 11.5, 30.0],  # the spread covers both
    f"{BASE}+opt=adam": [None, None, None],  # never reaches 80%
}

STUDY = {
    "description": "a synthetic study",
    "claim": "smaller batches reach 80% sooner; Adam never does",
    "base": BASE,
    "design": "one-at-a-time",
    "factors": {
        "batch": {
            "32": {"hyperparameters.batch_size": 32},
            "128": {"hyperparameters.batch_size": 128},
            "256": {"hyperparameters.batch_size": 256},
        },
        "opt": {"adam": {"hyperparameters.optimizer": "adam"}},
    },
    "seeds": [0, 1, 2],
    "ladder": [70.0, 80.0],
    "checks": [
        {"claim": "batch 32 is faster", "measure": "time", "rung": 80.0, "variant": f"{BASE}+batch=32", "direction": "lower"},
        {"claim": "batch 128 is faster", "measure": "time", "rung": 80.0, "variant": f"{BASE}+batch=128", "direction": "lower"},
        {"claim": "batch 256 is faster", "measure": "time", "rung": 80.0, "variant": f"{BASE}+batch=256", "direction": "lower"},
        {"claim": "Adam never reaches 80%", "measure": "reaches", "rung": 80.0, "variant": f"{BASE}+opt=adam", "direction": "never_reaches"},
        {"claim": "Adam is slower to 80%", "measure": "time", "rung": 80.0, "variant": f"{BASE}+opt=adam", "direction": "higher"},
        {"claim": "batch 32 is more accurate", "measure": "final_accuracy", "variant": f"{BASE}+batch=32", "direction": "higher"},
    ],
}


def make_runs(results, seconds: dict[str, list[float | None]], seeds) -> None:
    for entry, per_seed in seconds.items():
        for seed, s in zip(seeds, per_seed, strict=False):
            final = 85.0 + (1.0 if entry.endswith("batch=32") else 0.0) + 0.1 * seed
            run_dir(results, entry, seed, threshold=80.0, tsv=tsv(None if s is None else s / 3600, final))


def summarize(tmp_path, doc, seconds=SECONDS, name="synthetic"):
    study = tmp_path / "config" / "studies" / f"{name}.yaml"
    study.parent.mkdir(parents=True, exist_ok=True)
    study.write_text(yaml.safe_dump(doc, sort_keys=False))
    results = tmp_path / "results"
    make_runs(results, seconds, doc["seeds"])
    out = results / "studies"
    proc = run_cli(
        "study",
        "summarize",
        "--study",
        str(study),
        "--entries-dir",
        str(SMOKE),
        "--runs",
        str(results / "runs"),
        "--json",
        str(out / f"{name}.json"),
        "--html",
        str(out / f"{name}.html"),
    )
    assert proc.returncode == 0, proc.stderr
    return json.loads((out / f"{name}.json").read_text()), (out / f"{name}.html").read_text(), proc.stdout


def test_each_verdict_from_real_run_directories(tmp_path):
    summary, page, stdout = summarize(tmp_path, STUDY)
    by_claim = {v["claim"]: v for v in summary["verdicts"]}
    fast = by_claim["batch 32 is faster"]
    assert fast["verdict"] == "reproduced" and fast["seeds"] == [3, 3] and fast["confidence"] == 0.9
    # the interval is the smallest and largest of the nine base/variant ratios (3 against 3: k = 1)
    ratios = sorted(b / v for v in SECONDS[f"{BASE}+batch=32"] for b in SECONDS[BASE])
    assert fast["low"] == pytest.approx(ratios[0]) and fast["high"] == pytest.approx(ratios[-1]) and fast["estimate"] == pytest.approx(ratios[4])
    assert by_claim["batch 128 is faster"]["verdict"] == "not reproduced"
    assert by_claim["batch 128 is faster"]["high"] == pytest.approx(12.0 / 20.0)
    spread = by_claim["batch 256 is faster"]
    assert spread["verdict"] == "inconclusive" and spread["low"] < 1 < spread["high"]
    never = by_claim["Adam never reaches 80%"]
    assert never["verdict"] == "reproduced" and never["reached"] == 0
    slower = by_claim["Adam is slower to 80%"]
    # every seed never reached it: each ratio base/inf is 0, counted, not dropped
    assert slower["verdict"] == "reproduced" and slower["estimate"] == 0.0 and slower["high"] == 0.0
    accuracy = by_claim["batch 32 is more accurate"]
    assert accuracy["verdict"] == "reproduced" and accuracy["effect"] == "difference" and accuracy["estimate"] == pytest.approx(1.0)
    # the stage's line names each verdict; the page has the verdict table, the estimate and the interval
    assert (
        "batch 32 is faster: reproduced: time to 80: smoke-fastnet / smoke-fastnet+batch=32 = 2.00x, 90% interval [1.67x, 2.40x], 3 against 3 seeds" in stdout
    )
    section = page[page.index('id="verdicts"') : page.index("</table>", page.index('id="verdicts"'))]
    assert section.count('<tr class="verdict ') == len(STUDY["checks"])
    assert '<tr class="verdict not-reproduced"><td>batch 128 is faster</td>' in section and "[1.67x, 2.40x] (90%)" in section
    assert "0 of 3 reached" in section


def test_the_record_and_the_docs_line_give_the_same_verdicts_from_the_runs(tmp_path, monkeypatch):
    summary, _, _ = summarize(tmp_path, STUDY)
    record = bench_studies.study_record("synthetic", tmp_path / "results")
    assert record["checks"] == summary["checks"] and record["verdicts"] == summary["verdicts"]
    # per run, every value a check reads
    run = record["variants"][1]["runs"][0]
    assert {"time_to_accuracy_hours", "epochs_to_accuracy", "seconds_per_epoch", "final_accuracy", "final_held_out_accuracy"} <= set(run)
    lines = docs.study_verdicts(record)
    assert lines[0].startswith("**Verdict** (4 reproduced, 1 not reproduced, 1 inconclusive), each of the record's checks")
    assert "- *batch 32 is faster*: **reproduced**: time to 80: smoke-fastnet / smoke-fastnet+batch=32 = 2.00x, 90% interval [1.67x, 2.40x]" in lines[2]
    # the docs compute, never copy: a record whose verdicts were edited still renders what its runs say
    record["verdicts"][0]["verdict"] = "not reproduced"
    assert docs.study_verdicts(record) == lines
    # a record made before studies had checks: the study file's, said so, from the same runs
    old = {k: v for k, v in record.items() if k not in ("checks", "verdicts")}
    again = docs.study_verdicts(old, root=tmp_path)
    assert "each of `config/studies/synthetic.yaml`'s (the record has none) checks" in again[0] and again[2:] == lines[2:]
    # and the whole block of a written record
    out = tmp_path / "docs" / "measurements"
    assert bench_studies.main(["synthetic", "--results", str(tmp_path / "results"), "--record", "--record-dir", str(out)]) == 0
    page = tmp_path / "docs" / "page.md"
    page.write_text("# P\n\n<!-- generated: measurements/study-synthetic.json -->\nold\n<!-- end generated -->\n")
    text = docs.generate(page.read_text(), page)
    assert "\n".join(lines) in text


def test_a_one_seed_study_is_inconclusive_unless_a_rung_is_never_reached(tmp_path):
    doc = {**STUDY, "seeds": [0]}
    summary, page, _ = summarize(tmp_path, doc, name="one-seed")
    got = {v["claim"]: (v["verdict"], v["reason"]) for v in summary["verdicts"]}
    assert got["batch 32 is faster"] == ("inconclusive", "1 against 1 seeds: no interval (the fewest is 3 against as many)")
    assert got["batch 128 is faster"][0] == "inconclusive" and got["batch 256 is faster"][0] == "inconclusive"
    assert got["batch 32 is more accurate"][0] == "inconclusive"
    # a rung never reached is categorical: decided on one seed
    assert got["Adam never reaches 80%"] == ("reproduced", None)
    assert got["Adam is slower to 80%"][0] == "reproduced" and "decided whatever the number of seeds" in got["Adam is slower to 80%"][1]
    assert "no interval" in page


def test_a_one_sample_gap_needs_five_seeds(tmp_path):
    """The held-out gap claimed below a point: the median interval of five seeds decides it; four cannot."""
    gaps = [0.2, -0.1, 0.4, 0.3, 0.1]
    doc = {
        "description": "gap",
        "claim": "small gap",
        "base": BASE,
        "design": "one-at-a-time",
        "factors": {"held_out": {"5000": {"held_out": 5000}}},
        "seeds": [0, 1, 2, 3, 4],
        "ladder": [80.0],
        "checks": [{"claim": "the gap is under a point", "measure": "held_out_gap", "variant": f"{BASE}+held_out=5000", "below": 1.0}],
    }
    results = tmp_path / "results"
    for seed, gap in enumerate(gaps):
        for entry in (BASE, f"{BASE}+held_out=5000"):
            d = run_dir(results, entry, seed, threshold=80.0, tsv=tsv(10.0 / 3600))
            log = pd.read_parquet(d / "train.parquet")
            log["top1Accuracy"] += 0.5 * seed  # seeds of different accuracy: the gap of the medians is not the median gap
            log["held_out_top1Accuracy"] = log["top1Accuracy"] - gap
            log.to_parquet(d / "train.parquet", index=False)
    summary, _, _ = summarize(tmp_path, doc, seconds={}, name="gap")
    (result,) = summary["verdicts"]
    assert result["verdict"] == "reproduced" and result["effect"] == "median"
    assert (result["low"], result["estimate"], result["high"]) == pytest.approx((-0.1, 0.2, 0.4))
    (held,) = [v for v in summary["variants"] if v["id"] == f"{BASE}+held_out=5000"]
    assert held["generalization_gap"] == pytest.approx(0.2)  # the table shows what the check decided on
    doc4 = {**doc, "seeds": [0, 1, 2, 3]}
    (tmp_path / "config/studies/gap.yaml").write_text(yaml.safe_dump(doc4))
    proc = run_cli(
        "study",
        "summarize",
        "--study",
        str(tmp_path / "config/studies/gap.yaml"),
        "--entries-dir",
        str(SMOKE),
        "--runs",
        str(results / "runs"),
        "--json",
        str(tmp_path / "g4.json"),
        "--html",
        str(tmp_path / "g4.html"),
        check=True,
    )
    (result,) = json.loads((tmp_path / "g4.json").read_text())["verdicts"]
    assert result["verdict"] == "inconclusive" and result["reason"] == "4 seeds: the median interval needs 5", proc.stdout


@pytest.mark.parametrize(
    ("check", "message"),
    [
        ({"variant": "nope"}, "field 'checks.0.variant': no variant 'nope' in the study"),
        ({"rung": 75.0}, "field 'checks.0.rung': 75 is not on the ladder (70, 80)"),
        ({"rung": None}, "field 'checks.0.rung': expected a number"),
        ({"direction": "sideways"}, "field 'checks.0.direction': expected one of lower, higher, reaches, never_reaches"),
        ({"direction": "reaches"}, "field 'checks.0.direction': the measure time needs direction lower or higher"),
        ({"min_effect": 0.5}, "field 'checks.0.min_effect': a ratio's smallest effect is a factor >= 1"),
        ({"against": f"{BASE}+batch=32"}, "field 'checks.0.against': the variant 'smoke-fastnet+batch=32' against itself"),
        ({"below": 1.0}, "field 'checks.0.below': only the measure held_out_gap takes 'below'"),
        ({"colour": "red"}, "field 'checks.0': unknown key 'colour'"),
    ],
)
def test_a_bad_check_is_one_line_naming_the_file_and_the_field(tmp_path, check, message):
    first = {**STUDY["checks"][0], **check}
    path = tmp_path / "s.yaml"
    path.write_text(yaml.safe_dump({**STUDY, "checks": [first]}))
    proc = run_cli("study", "variants", str(path), "--entries-dir", str(SMOKE))
    assert proc.returncode == 1 and "Traceback" not in proc.stderr, proc.stderr
    assert len(proc.stderr.strip().splitlines()) == 1 and message in proc.stderr and str(path) in proc.stderr, proc.stderr


def test_every_ready_made_study_states_its_claim_as_checks_with_the_seeds_they_need():
    """Each study of config/studies/ (but the tiny test ones) has checks, and
    seeds enough for them: 3 for a comparison, 5 for a one-sample gap."""
    from dawnpipe.studies import load_study
    from dawnpipe.verdict import fewest_seeds

    need = fewest_seeds()
    for path in sorted((ROOT / "config/studies").glob("*.yaml")):
        if path.stem.startswith("test-"):
            continue
        study = load_study(path, ROOT / "config/entries")
        assert study.checks, f"{path}: no checks"
        for c in study.checks:
            if c["measure"] == "reaches":
                continue
            wanted = need["one_sample"] if c.get("below") is not None else need["two_sample"]
            assert len(study.seeds) >= wanted, f"{path}: {c['claim']}: {len(study.seeds)} seeds, the rule needs {wanted}"


def test_each_measure_reads_its_per_seed_values():
    """dawnpipe.studies.checks on rows as the study JSON holds them: cost is
    each seed's time x the row's price (none without a price), epochs of a
    seed that never reached are infinite, seconds per epoch and the held-out
    gap (two samples) are read per run."""
    from dawnpipe.studies.checks import evaluate

    def row(hours, epochs, spe, held, price=0.1):
        runs = [
            {
                "time_to_accuracy_hours": {"80.0": h},
                "epochs_to_accuracy": {"80.0": e},
                "seconds_per_epoch": s,
                "final_accuracy": 90.0,
                "final_held_out_accuracy": g,
            }
            for h, e, s, g in zip(hours, epochs, spe, held, strict=True)
        ]
        return {"runs": runs, "usd_per_hour": price}

    rows = {
        "base": row([0.02, 0.021, 0.022], [4, 4, 5], [10.0, 10.5, 11.0], [89.0, 89.2, 89.1]),
        "v": row([0.01, 0.011, None], [2, 2, None], [5.0, 5.2, 5.1], [89.9, 89.8, 89.7], price=0.3),
        "free": row([0.01, 0.01, 0.01], [2, 2, 2], [5.0, 5.0, 5.0], [89.0, 89.0, 89.0], price=None),
    }
    check = {"claim": "c", "variant": "v", "against": "base", "rung": 80.0, "direction": "lower", "min_effect": None, "below": None}
    cost = evaluate({**check, "measure": "cost"}, rows)
    # 0.02 x 0.1 over 0.01 x 0.3 ... and a seed that never reached: inf cost, counted
    assert cost["effect"] == "ratio" and cost["low"] == 0.0 and cost["high"] == pytest.approx(0.022 * 0.1 / (0.01 * 0.3))
    assert cost["verdict"] == "not reproduced"  # faster, but at three times the price: every pair costs more
    epochs = evaluate({**check, "measure": "epochs", "direction": "higher"}, rows)
    assert epochs["low"] == 0.0 and epochs["verdict"] == "inconclusive"  # one seed never: some pairs say fewer, some infinitely many
    spe = evaluate({**check, "measure": "seconds_per_epoch", "rung": None}, rows)
    assert spe["verdict"] == "reproduced" and spe["low"] == pytest.approx(10.0 / 5.2)
    gap = evaluate({**check, "measure": "held_out_gap", "rung": None}, rows)  # the variant's gap is lower (held-out higher)
    assert gap["effect"] == "difference" and gap["verdict"] == "reproduced" and gap["high"] == pytest.approx(0.3 - 0.8)
    no_price = evaluate({**check, "measure": "cost", "variant": "free"}, rows)
    assert no_price["verdict"] == "inconclusive" and no_price["reason"] == "no price for the hardware of free"
