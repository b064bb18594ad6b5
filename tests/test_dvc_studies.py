"""Study variants under DVC, for real (a temporary git repository made from
the project, real `dvc repro`, `dvc status` and `dvc params diff`): a
variant's stages rerun exactly when its resolved recipe changes, whether
through its base entry or its study file, and not on a comment edit; a
stale variant recipe stops the pipeline's check in one line.

The repository runs a two-variant study of the smoke-size recipe (batch 32
and 128, one seed) on the tiny data of config/test-study.yaml; only the
variants' train and flops stages (and the data stages they need) run.
"""

from __future__ import annotations

import json
import shutil

import pytest
import yaml
from conftest import ROOT, copy_project
from test_dvc_pipeline import DVC_PARTS, commit, dvc_env, run, stages_run

from dawnpipe.pipeline.config import resolve

STUDY = """\
# a two-variant study for this test
description: batch size on the smoke-size recipe
base: smoke-fastnet
design: one-at-a-time
factors:
  batch:
    "32": {hyperparameters.batch_size: 32}
    "128": {hyperparameters.batch_size: 128}
lr_scaling: {rule: linear, base_batch: 64}
seeds: [0]
ladder: [50.0, 60.0]
"""
A, B = "smoke-fastnet+batch=32", "smoke-fastnet+batch=128"
TARGETS = [f"train@{A}-0", f"train@{B}-0", f"flops@{A}", f"flops@{B}"]
BASE = "config/entries/smoke/smoke-fastnet.yaml"


def changed(repo, env) -> set[str]:
    """The target stages DVC would run now (dvc status of the targets)."""
    return set(json.loads(run(repo, env, "dvc", "status", "--json", *TARGETS).stdout or "{}"))


def edit(repo, path, old, new):
    text = (repo / path).read_text(encoding="utf-8")
    assert text.count(old) == 1, (path, old)
    (repo / path).write_text(text.replace(old, new), encoding="utf-8")


def regenerate(repo, env) -> set[str]:
    """`dawnpipe pipeline dvc`, as a user does after editing a study or an entry; the generated files that changed."""
    run(repo, env, "python", "-m", "dawnpipe", "pipeline", "dvc")
    porcelain = run(repo, env, "git", "status", "--porcelain").stdout.splitlines()
    return {line[3:] for line in porcelain if line[3:].startswith(("dvc-variants/", "dvc.yaml", "params.yaml"))}


@pytest.mark.slow
def test_a_variant_reruns_under_dvc_exactly_when_its_recipe_changes(tmp_path, fashion_mnist_source):
    env = dvc_env(tmp_path)
    repo = copy_project(tmp_path / "repo")
    for part in DVC_PARTS:
        (repo / part).parent.mkdir(parents=True, exist_ok=True)
        shutil.copy2(ROOT / part, repo / part)
    config = resolve(["config/test-study.yaml"], root=ROOT).values
    config["studies"] = ["t"]
    (repo / "config/config.yaml").write_text(yaml.safe_dump(config, sort_keys=False), encoding="utf-8")
    (repo / "config/studies/t.yaml").write_text(STUDY, encoding="utf-8")
    run(repo, env, "python", "-m", "dawnpipe", "pipeline", "dvc")
    recipe = yaml.safe_load((repo / f"dvc-variants/{A}.yaml").read_text())
    assert recipe["hyperparameters"]["batch_size"] == 32 and recipe["hyperparameters"]["lr"] == pytest.approx(0.1)  # 0.2 x 32 / 64
    run(repo, env, "git", "init", "-q", "-b", "main")
    commit(repo, env, "project")
    first = stages_run(run(repo, env, "dvc", "repro", *TARGETS).stdout)
    assert set(TARGETS) <= set(first)
    commit(repo, env, "dvc repro")
    assert changed(repo, env) == set()

    # comments in the base entry and the study file: nothing generated changes, nothing reruns, the check passes
    edit(repo, BASE, "# Smoke-test size", "# An edited comment. Smoke-test size")
    edit(repo, "config/studies/t.yaml", "# a two-variant", "# an edited comment: a two-variant")
    assert regenerate(repo, env) == set()
    assert changed(repo, env) == set()
    assert stages_run(run(repo, env, "dvc", "repro", "pipeline").stdout) == ["pipeline"]
    run(repo, env, "git", "checkout", "--", "config")

    # a value of the base entry: the check says the variants' recipes are stale, in one line ...
    edit(repo, BASE, "weight_decay: 0.0005 ", "weight_decay: 0.001 ")
    proc = run(repo, env, "dvc", "repro", "pipeline", check=False)
    assert proc.returncode != 0
    (line,) = [ln for ln in (proc.stdout + proc.stderr).splitlines() if "dawnpipe pipeline: error:" in ln]
    assert f"dvc-variants/{A}.yaml" in line and f"dvc-variants/{B}.yaml" in line and "write them again" in line, line
    # ... and once written again both variants' training reruns, not their FLOP counts (weight decay is not counted)
    assert regenerate(repo, env) == {f"dvc-variants/{A}.yaml", f"dvc-variants/{B}.yaml"}
    assert changed(repo, env) == {f"train@{A}-0", f"train@{B}-0"}
    diff = json.loads(run(repo, env, "dvc", "params", "diff", "--json").stdout)
    assert set(diff) == {BASE, f"dvc-variants/{A}.yaml", f"dvc-variants/{B}.yaml"}  # the base entry: the params of the base's own runs
    assert {k: diff[f"dvc-variants/{A}.yaml"]["hyperparameters.weight_decay"][k] for k in ("old", "new")} == {"old": 0.0005, "new": 0.001}
    run(repo, env, "git", "checkout", "--", "config")
    assert regenerate(repo, env) == set() and changed(repo, env) == set()

    # one variant's overrides in the study file: that variant alone, its FLOP count too (the batch is counted)
    edit(repo, "config/studies/t.yaml", '"32": {hyperparameters.batch_size: 32}', '"32": {hyperparameters.batch_size: 48}')
    assert regenerate(repo, env) == {f"dvc-variants/{A}.yaml"}
    assert changed(repo, env) == {f"train@{A}-0", f"flops@{A}"}
    again = stages_run(run(repo, env, "dvc", "repro", *TARGETS).stdout)
    assert sorted(again) == sorted([f"train@{A}-0", f"flops@{A}"])
    trained = json.loads((repo / f"results/runs/{A}/seed0/run.json").read_text())
    assert trained["settings"]["entry"]["hyperparameters"]["batch_size"] == 48
    assert changed(repo, env) == set()
