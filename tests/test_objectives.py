"""Objectives as data (src/dawnpipe/objectives/objectives.yaml): adding one is one entry
in the table, which the rows, the ranked tables (JSON) and the page then
carry without any other change; a malformed table is named with its field."""

from __future__ import annotations

import re

import pytest
import yaml
from conftest import ROOT
from pages import run

from dawnpipe import leaderboard, objectives
from dawnpipe.errors import DawnpipeError
from dawnpipe.report.render import render_html
from dawnpipe.report.rows import objective_rows

TABLE = yaml.safe_load((ROOT / "src/dawnpipe/objectives/objectives.yaml").read_text())

WALL = {
    "title": "Wall time to accuracy",
    "what": "wall clock to the threshold, evaluation included",
    "unit": "hours",
    "result": "train",
    "run": "tta.wall_time_to_accuracy_hours",
    "submission": None,
    "fields": {"epochs": "tta.epochs_to_accuracy"},
    "columns": {"epochs": "Epochs"},
    "optional": True,
}


@pytest.fixture
def with_wall_time(monkeypatch):
    table = objectives.from_doc({**TABLE, "train_wall_time": WALL}, source="a table with one more objective")
    monkeypatch.setattr(objectives, "objectives", lambda: table)


def test_a_new_objective_is_one_entry_of_the_table(with_wall_time):
    runs = [run("fastnet", s, h, []) for s, h in enumerate((0.03, 0.02, 0.025))]
    runs += [run("wide", s, h, []) for s, h in enumerate((0.05, 0.04, 0.045))] + [run("slow", 0, None, [])]
    rows, excluded = objective_rows(runs)
    board = leaderboard.build(rows, excluded)
    (table,) = [t for t in board["objectives"] if t["objective"] == "train_wall_time"]
    # an entry over its seeds: the median; every seed of fastnet faster than every seed of wide, so ranks 1 and 2
    assert [(r["source"], r["rank"]) for r in table["rows"]] == [("runs/fastnet", 1), ("runs/wide", 2)]
    assert [r["display"] for r in table["rows"]] == ["0:01:30", "0:02:42"] and table["rows"][0]["epochs"] == 3
    assert table["title"] == "Wall time to accuracy" and table["columns"] == {"epochs": "Epochs"}
    board.update(generated="now", config="test")
    html = render_html(board, runs, [], config_name="test")
    # the page gives the new objective its own section (title, its column, its rows in rank
    # order with the rounded value and the exact one on hover) and a line of the summary
    section = re.search(r'<section id="fashion-mnist-train_wall_time-90\.0">(.*?)</section>', html, re.S).group(1)
    assert section.startswith("\n<h3>Wall time to accuracy <span")
    header = re.search(r"<thead><tr>(.*?)</tr></thead>", section).group(1)
    assert re.findall(r"<th>(.*?)</th>", header) == [
        "Rank",
        "Wall time to accuracy",
        "Seeds",
        "Model",
        "Author",
        "Hardware",
        "Framework",
        "Epochs",
        "Date",
        "Source",
    ]
    cells = [re.findall(r"<td[^>]*>(.*?)</td>", row) for row in re.findall(r"<tr>(<td.*?)</tr>", section, re.S)]
    assert [(c[0], c[1], c[2], c[7]) for c in cells] == [
        ("1", "0:01:30", "3 seeds, range 0:01:12 to 0:01:48", "3"),
        ("2", "0:02:42", "3 seeds, range 0:02:24 to 0:03:00", "3"),
    ]
    assert 'title="0.025 hours (median of 3 seeds)">0:01:30</td>' in section and 'title="0.045 hours (median of 3 seeds)">0:02:42</td>' in section
    assert '<a href="#fashion-mnist-train_wall_time-90.0">Wall time to accuracy</a>' in html


def test_the_shipped_table_is_the_four_objectives_and_energy():
    assert list(objectives.objectives()) == ["train_time", "train_cost", "inference_latency", "inference_cost", "train_energy"]
    assert [o.name for o in objectives.of_result("inference")] == ["inference_latency", "inference_cost"]


@pytest.mark.parametrize(
    "change, message",
    [
        ({"unit": "furlongs"}, "field 'train_wall_time.unit': no display rule for 'furlongs'"),
        ({"result": "both"}, "field 'train_wall_time.result': expected one of train, inference"),
        ({"run": "elsewhere.value"}, "field 'train_wall_time.run': expected text matching"),
        ({"optional": "yes"}, "field 'train_wall_time.optional': expected true or false, got str 'yes'"),
        ({"colour": "red"}, "field 'train_wall_time': unknown key 'colour'"),
    ],
)
def test_a_malformed_objective_is_named_with_its_field(change, message):
    with pytest.raises(DawnpipeError) as raised:
        objectives.from_doc({**TABLE, "train_wall_time": {**WALL, **change}}, source="objectives.yaml")
    assert str(raised.value).startswith(f"objectives.yaml: {message}")
