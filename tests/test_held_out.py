"""The held-out split (entry field held_out): the training split's last N
items, the same for every entry, never trained on, scored at every evaluation
(so at the threshold checkpoint) in both frameworks."""

from __future__ import annotations

import json

import numpy as np
import pandas as pd
import pytest
from conftest import ROOT, run_cli
from tiny_training import TINY_ENTRY, train_args, write_entry

from dawnpipe.data.loader import DEFAULT_HELD_OUT, held_out_size, held_out_split, load_split
from dawnpipe.errors import DawnpipeError


def test_the_held_out_items_are_the_last_ones_and_never_in_training(prepared_fashion_mnist):
    full = load_split(prepared_fashion_mnist, "train")
    n = len(full.labels)
    held = held_out_split(prepared_fashion_mnist, 5000)
    assert np.array_equal(np.asarray(held.images), np.asarray(full.images[n - 5000 :])) and len(held.labels) == 5000
    everything = load_split(prepared_fashion_mnist, "train", None, held_out=5000)
    assert len(everything.labels) == n - 5000  # no limit: all but the held-out items
    limited = load_split(prepared_fashion_mnist, "train", n, held_out=5000)
    assert len(limited.labels) == n - 5000  # a limit never reaches into them
    train_rows = {bytes(x) for x in np.asarray(everything.images[-2000:])}
    assert not any(bytes(x) in train_rows for x in np.asarray(held.images[:2000]))
    assert np.array_equal(np.asarray(held_out_split(prepared_fashion_mnist, 5000).images), np.asarray(held.images))  # the same for every entry
    assert held_out_size({"held_out": True}) == DEFAULT_HELD_OUT == 5000 and held_out_size({}) == held_out_size({"held_out": False}) == 0
    with pytest.raises(DawnpipeError, match="leaves none"):
        load_split(prepared_fashion_mnist, "train", None, held_out=n)


@pytest.mark.slow
@pytest.mark.parametrize("framework", ["pytorch", "tensorflow"])
def test_every_evaluation_is_also_scored_on_the_held_out_items(tmp_path, prepared_fashion_mnist, framework):
    changes = {"held_out": 1000, "framework": framework}
    if framework == "tensorflow":  # a narrow ResNet-20 (the TensorFlow zoo has no fastnet) for two epochs: two evaluations to check
        changes.update(model="resnet20", model_args={"width": 4}, hyperparameters={**TINY_ENTRY["hyperparameters"], "epochs": 2})
    entry = write_entry(tmp_path / "e.yaml", **changes)
    out = tmp_path / "run"
    run_cli(*train_args(entry, prepared_fashion_mnist, out), check=True, timeout=900)
    log = pd.read_parquet(out / "train.parquet")
    assert "held_out_top1Accuracy" in log and log["held_out_top1Accuracy"].between(0, 100).all()
    result = json.loads((out / "run.json").read_text())["result"]
    assert result["held_out_items"] == 1000
    if framework == "tensorflow":
        assert len(log) == 2  # both epochs' evaluations
        return
    # the report: test against held-out accuracy and the gap, at the threshold checkpoint
    tta = out / "time_to_accuracy.json"
    run_cli(
        "extract",
        "--tsv",
        str(out / "train.tsv"),
        "--log-parquet",
        str(out / "train.parquet"),
        "--run-json",
        str(out / "run.json"),
        "--prices",
        str(ROOT / "config" / "prices.yaml"),
        "--out",
        str(tta),
        check=True,
    )
    run_cli(
        "report",
        "--runs",
        str(out),
        "--config-name",
        "held-out-test",
        "--json",
        str(tmp_path / "lb.json"),
        "--html",
        str(tmp_path / "lb.html"),
        "--table",
        str(tmp_path / "runs.parquet"),
        "--csv",
        str(tmp_path / "runs.csv"),
        check=True,
    )
    reached = json.loads(tta.read_text())
    row = log[log["epoch"] == reached["epochs_to_accuracy"]].iloc[0] if reached["reached"] else log.iloc[-1]
    gap = row["top1Accuracy"] - row["held_out_top1Accuracy"]
    table = pd.read_parquet(tmp_path / "runs.parquet")
    assert table["generalization_gap"].iloc[0] == pytest.approx(gap) and table["held_out_metric"].iloc[0] == row["held_out_top1Accuracy"]
    page = (tmp_path / "lb.html").read_text()
    section = page[page.index('id="generalization"') :]
    assert f"{gap:+.2f}" in section[: section.index("</table>")]
