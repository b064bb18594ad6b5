"""The leaderboard's entries over their seeds (dawnpipe.report.rows,
dawnpipe.leaderboard): one row per entry with the median, its spread (the
median's interval with five seeds, else the range, one seed said so), a seed
that never reached counted as infinitely slow, no median with half or more
not reaching; ranks by the two-sample rule of dawnpipe.verdict (1 + the rows
faster), ties marked with each one's seeds, a tie that is not transitive, and
published rows kept in their published order. The page in a real browser:
tests/test_page_browser.py."""

from __future__ import annotations

import pytest
from pages import run, seeds_runs

from dawnpipe import leaderboard
from dawnpipe.report.render import render_html
from dawnpipe.report.rows import objective_rows


def board_of(runs, extra=()):
    rows, excluded = objective_rows(runs)
    return leaderboard.build([*rows, *extra], excluded)


def train_time(board):
    (table,) = [t for t in board["objectives"] if t["objective"] == "train_time" and t["demo_threshold"] and t["task"] == "fashion-mnist"]
    return {r.get("entry") or r["source"]: r for r in table["rows"]}, table["rows"]


def test_one_row_per_entry_the_median_over_its_seeds_and_its_spread():
    by_entry, _ = train_time(board_of(seeds_runs()))
    a = by_entry["entry-a"]
    assert a["seeds"] == [0, 1, 2] and a["seed_sources"] == ["runs/entry-a/seed0", "runs/entry-a/seed1", "runs/entry-a/seed2"]
    assert a["source"] == "runs/entry-a" and a["value"] == pytest.approx(11 / 3600) and a["display"] == "0:00:11"
    assert a["spread"]["kind"] == "range" and a["spread_display"] == "3 seeds, range 0:00:10 to 0:00:12"
    # five seeds: the interval of the median (k = 1: the extremes, 93.75%)
    g = by_entry["entry-g"]
    assert g["spread"]["kind"] == "median interval" and g["spread"]["confidence"] == pytest.approx(15 / 16)
    assert g["spread_display"] == "5 seeds, the median's 94% interval 0:00:09 to 0:00:13"
    # a seed that never reached counts as infinitely slow: kept, and it moves the median
    f = by_entry["entry-f"]
    assert f["seed_values"][2] == "inf" and f["value"] == pytest.approx(9.5 / 3600)
    assert f["spread_display"] == "3 seeds, range 0:00:09 to never; 1 did not reach"
    d = by_entry["entry-d"]
    assert d["seeds"] == [0] and d["spread_display"] == "one seed: the rule cannot tell it apart from others"


def test_half_or_more_seeds_not_reaching_leave_no_median():
    board = board_of(seeds_runs())
    by_entry, _ = train_time(board)
    assert "entry-e" not in by_entry
    reasons = {e["source"]: e["reason"] for e in board["excluded"] if "train_time" in e["objectives"]}
    assert reasons["runs/entry-e"] == "2 of 4 seeds did not reach the threshold: no median (did not converge)"
    assert reasons["runs/entry-e/seed2"] == "did not converge"  # each run's own exclusion stays


def test_ranks_count_the_rows_the_rule_says_are_faster_ties_need_not_be_transitive():
    by_entry, rows = train_time(board_of(seeds_runs()))
    # A: 10-12 s, B: 11.5-13.5 s, C: 13-15 s: A beats C, B ties both (every pair of A and C says
    # faster; some pairs of B say either): A and B rank 1, C 1 + 2 (A, and G of five seeds 9-13 s)
    assert by_entry["entry-a"]["rank"] == 1 and by_entry["entry-b"]["rank"] == 1 and by_entry["entry-c"]["rank"] == 3
    # one seed (D, 5 s) beats nobody and nobody beats it; F's never-reached seed makes it tie everyone
    assert by_entry["entry-d"]["rank"] == 1 and by_entry["entry-f"]["rank"] == 1
    # H (20-22 s): A, B, C and G are faster by the rule; D (one seed) and F (a seed never) are not
    assert by_entry["entry-h"]["rank"] == 1 + 4
    # listed by rank, then by value; each says whether the rule tells it from the row above
    assert [r["entry"] for r in rows] == ["entry-d", "entry-f", "entry-a", "entry-g", "entry-b", "entry-c", "entry-h"]
    assert rows[0]["tied_with_above"] is None
    assert rows[1]["tied_with_above"] == {"source": "runs/entry-d", "seeds": 1, "own_seeds": 3}
    assert by_entry["entry-c"]["tied_with_above"] == {"source": "runs/entry-b", "seeds": 3, "own_seeds": 3}
    assert by_entry["entry-h"]["tied_with_above"] is None  # C is faster


def test_published_rows_keep_their_order_and_tie_with_entries_of_few_seeds():
    published = [
        {"task": "fashion-mnist", "objective": "train_time", "threshold": 90.0, "demo_threshold": True, "value": v / 3600, "source": f"pub/{name}.json"}
        for name, v in (("p1", 30.0), ("p2", 31.0), ("p3", 30.0))
    ]
    board = board_of([run("entry-a", s, t / 3600, []) for s, t in enumerate((10.0, 11.0, 12.0))], published)
    _, rows = train_time(board)
    ranks = {r["source"]: (r["rank"], r["tied_with_above"]) for r in rows}
    # between published rows the value decides (equal values share a rank); against three seeds, one run ties
    assert ranks["pub/p1.json"][0] == 1 and ranks["pub/p3.json"][0] == 1 and ranks["pub/p2.json"][0] == 3
    assert ranks["runs/entry-a"] == (1, None)
    assert ranks["pub/p2.json"][1] is None and ranks["pub/p3.json"][1] == {"source": "pub/p1.json", "seeds": None, "own_seeds": None}
    assert {r["spread_display"] for r in rows if r["source"].startswith("pub/")} == {"published: one run"}
    # twenty seeds against one published run: the rule can decide (P(U = 0) = 1/21)
    many = board_of([run("entry-z", s, (10.0 + s / 10) / 3600, []) for s in range(20)], published)
    _, rows = train_time(many)
    assert [(r["source"], r["rank"]) for r in rows][:2] == [("runs/entry-z", 1), ("pub/p1.json", 2)]


def test_the_page_shows_the_spread_the_ties_and_each_seeds_run():
    runs = seeds_runs()
    board = board_of(runs)
    board.update(generated="now", config="test")
    html = render_html(board, runs, [], config_name="test")
    section = html[html.index('id="fashion-mnist-train_time-90.0"') :]
    section = section[: section.index("</table>")]
    assert "<th>Seeds</th>" in section
    assert '<span class="tag tie">tied with the row above (3 seeds against 1 seed)</span>' in section
    assert 'runs/entry-a (seeds <a href="#run-entry-a-0">0</a>, <a href="#run-entry-a-1">1</a>, <a href="#run-entry-a-2">2</a>)' in section
    assert "3 seeds, range 0:00:10 to 0:00:12" in section and "one seed: the rule cannot tell it apart from others" in section
    summary = html[html.index('id="summary"') : html.index("</table>", html.index('id="summary"'))]
    assert "tied for first with" in summary
