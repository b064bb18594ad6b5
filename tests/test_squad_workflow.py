"""SQuAD end to end through Snakemake on a copy of the project: a generated
SQuAD v1.1 pair served over HTTP on 127.0.0.1 is fetched (a checksum mismatch
is refused first), prepared, a small reader is trained, its time to accuracy
extracted, its latency measured question by question, and the leaderboard
shows F1 as a 0..1 fraction under a labelled demo threshold."""

from __future__ import annotations

import hashlib
import json

import pandas as pd
import pytest
import yaml
from conftest import copy_project, resolved_config, run_snakemake
from local_http import serve
from squad_synth import write_expect, write_squad_files

pytestmark = pytest.mark.slow


def write_config(work, url, expect) -> str:
    config = resolved_config(work, "config/test-squad.yaml")
    config["data_sources"] = {"squad": url}
    config["data_checksums"] = {"squad": str(expect)}
    (work / "config" / "test-squad-http.yaml").write_text(yaml.safe_dump(config))
    return "config/test-squad-http.yaml"


def test_squad_from_http_to_leaderboard(tmp_path):
    work = copy_project(tmp_path / "project")
    paths = write_squad_files(tmp_path / "generated")
    files = {name: p.read_bytes() for name, p in paths.items()}
    expect = write_expect(paths, tmp_path / "expect.yaml")
    bad = yaml.safe_load(expect.read_text())
    wrong = hashlib.sha256(b"not the file").hexdigest()
    bad["files"]["train-v1.1.json"]["sha256"] = wrong
    bad_expect = tmp_path / "bad-expect.yaml"
    bad_expect.write_text(yaml.safe_dump(bad))

    with serve(files) as (url, log):
        refused = run_snakemake(work, "data/raw/squad", "--cores", "1", "--configfile", write_config(work, url, bad_expect), check=False)
        assert refused.returncode == 1  # Snakemake's exit when a job fails
        fetch_log = (work / "results" / "logs" / "fetch" / "squad.log").read_text()
        assert "train-v1.1.json" in fetch_log and wrong in fetch_log and hashlib.sha256(files["train-v1.1.json"]).hexdigest() in fetch_log
        assert not (work / "data" / "raw" / "squad").exists()

        run_snakemake(work, "results/leaderboard.html", "--cores", "2", "--configfile", write_config(work, url, expect))
    assert {name for name, _ in log} == {"train-v1.1.json", "dev-v1.1.json"}

    config = resolved_config(work, "config/test-squad.yaml")
    threshold = config["thresholds"]["squad"]
    for seed in config["seeds"]:
        run = work / "results" / "runs" / "drqa-small" / f"seed{seed}"
        log = pd.read_csv(run / "train.tsv", sep="\t")
        assert list(log.columns) == ["epoch", "hours", "f1Score"] and log["f1Score"].between(0, 1).all()
        tta = json.loads((run / "time_to_accuracy.json").read_text())
        assert tta["reached"] and tta["demo_threshold"] and tta["threshold"] == threshold
        latency = json.loads((run / "latency.json").read_text())
        assert latency["items"] == 48 and latency["meets_threshold"] and 0 <= latency["accuracy"] <= 1

    board = json.loads((work / "results" / "leaderboard.json").read_text())
    squad = {t["objective"]: t for t in board["objectives"] if t["task"] == "squad" and t["rows"]}
    assert set(squad) == {"train_time", "train_cost", "inference_latency", "inference_cost"}
    assert all(t["threshold"] == threshold and t["demo_threshold"] and t["official_threshold"] == 0.75 for t in squad.values())
    assert not board["excluded"]

    html = (work / "results" / "leaderboard.html").read_text()
    best = json.loads((work / "results" / "runs" / "drqa-small" / "seed0" / "time_to_accuracy.json").read_text())["best_metric"]
    assert "SQuAD v1.1" in html and "dev F1" in html and "demo threshold (official 0.75)" in html
    assert f'<td class="num" data-sort="{best}">{best:.4f}</td>' in html  # F1 shown as a fraction, not as percent
