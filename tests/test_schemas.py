"""Schemas of our result tables: bad rows are named, good ones pass."""

import pandas as pd
import pytest

from dawnpipe.errors import DawnpipeError
from dawnpipe.schemas.results import LatencyResult, TimeToAccuracyResult, Top1Log, log_model, validate
from dawnpipe.tasks import get_task


def tta_row(**overrides):
    row = dict(
        entry="e",
        seed=0,
        task="fashion-mnist",
        model="m",
        framework="pytorch",
        hardware="local-cpu",
        threshold=93.0,
        official_threshold=93.0,
        demo_threshold=False,
        reached=True,
        epochs_to_accuracy=3.0,
        time_to_accuracy_hours=0.03,
        wall_time_to_accuracy_hours=0.04,
        usd_per_hour=1.0,
        cost_usd=0.03,
        best_metric=93.5,
        epochs_run=3.0,
        training_hours=0.03,
    )
    row.update(overrides)
    return pd.DataFrame([row])


def test_log_schema_names_column_and_row():
    frame = pd.DataFrame({"epoch": [1, 2, 3], "hours": [0.1, 0.2, 0.3], "top1Accuracy": [50.0, 104.2, 90.0]})
    with pytest.raises(DawnpipeError) as err:
        validate(Top1Log, frame, "runs/x/train.tsv")
    message = str(err.value)
    assert "runs/x/train.tsv" in message and "top1Accuracy" in message and "row 2" in message and "104.2" in message


def test_log_model_per_task():
    assert log_model(get_task("fashion-mnist")) is Top1Log
    assert "top5Accuracy" in log_model(get_task("imagenet")).columns
    f1 = pd.DataFrame({"epoch": [1], "hours": [0.1], "f1Score": [75.3]})  # F1 in percent is wrong
    with pytest.raises(DawnpipeError, match="f1Score"):
        validate(log_model(get_task("squad")), f1, "squad.tsv")


def test_time_to_accuracy_result_ok():
    """The row the refusals below change is itself valid: it comes back whole (so each refusal is of its one change)."""
    row = tta_row()
    pd.testing.assert_frame_equal(validate(TimeToAccuracyResult, row, "x"), row, check_dtype=False)


def test_reached_without_time_is_refused():
    with pytest.raises(DawnpipeError, match="reached_has_a_time"):
        validate(TimeToAccuracyResult, tta_row(time_to_accuracy_hours=None, cost_usd=None), "x")


def test_time_beyond_training_is_refused():
    with pytest.raises(DawnpipeError, match="time_within_training"):
        validate(TimeToAccuracyResult, tta_row(time_to_accuracy_hours=0.5), "x")


def test_latency_percentiles_must_be_ordered():
    row = dict(
        entry="e",
        seed=0,
        task="fashion-mnist",
        backend="eager",
        threads=1,
        items=10,
        warmup_items=1,
        accuracy=93.0,
        meets_threshold=True,
        latency_mean_ms=1.0,
        latency_p50_ms=1.0,
        latency_p90_ms=0.9,
        latency_p99_ms=1.2,
        latency_max_ms=2.0,
        usd_per_hour=None,
        cost_per_10k_usd=None,
    )
    with pytest.raises(DawnpipeError, match="percentiles_ordered"):
        validate(LatencyResult, pd.DataFrame([row]), "latency.json")
    row["latency_p90_ms"] = 1.1
    validate(LatencyResult, pd.DataFrame([row]), "latency.json")


def cases_of(schema, frame, columns=None) -> list[tuple]:
    from dawnpipe.schemas.tables import TableErrors

    with pytest.raises(TableErrors) as err:
        schema.check(frame, columns)
    return [tuple(c) for c in err.value.cases.itertuples(index=False)]


def test_a_value_that_is_not_a_number_is_named_and_its_column_left_unchecked():
    frame = pd.DataFrame({"epoch": ["1", "x"], "hours": [0.1, None], "top1Accuracy": [50.0, -1.0]})
    cases = cases_of(Top1Log, frame)
    assert [(column, check, row) for column, check, _, row in cases] == [
        ("epoch", "coerce_dtype('float64')", 1),  # and no bound checked on what is not a number
        ("hours", "not_nullable", 1),
        ("top1Accuracy", "greater_than_or_equal_to(0)", 1),
    ]
    assert [value for _, _, value, _ in cases][::2] == ["x", -1.0] and pd.isna(cases[1][2])


def test_coerced_columns_come_back_converted_and_others_must_already_be_of_their_type():
    from dawnpipe.schemas.results import RunLog

    frame = pd.DataFrame({"epoch": [1, 2], "hours": ["0.1", "0.2"], "top1Accuracy": [50, 60], "wall_hours": [1, 2]})
    checked = Top1Log.check(frame)
    assert [str(checked[c].dtype) for c in ("epoch", "hours", "top1Accuracy")] == ["float64"] * 3
    assert checked["wall_hours"].tolist() == [1, 2] and frame["hours"].tolist() == ["0.1", "0.2"]  # extra columns kept, the input untouched
    assert cases_of(RunLog, frame, ["wall_hours"]) == [("wall_hours", "dtype('float64')", "int64", None)]


def test_a_missing_column_is_named_unless_it_is_optional():
    assert cases_of(Top1Log, pd.DataFrame({"epoch": [1.0], "hours": [0.1]})) == [(None, "column_in_dataframe", "top1Accuracy", None)]
    row = {"entry": "e", "seed": 0, "task": "t", "backend": "eager", "threads": 1, "items": 10, "warmup_items": 1, "accuracy": 93.0}
    row |= {"meets_threshold": True, "usd_per_hour": None, "cost_per_10k_usd": None}
    row |= {f"latency_{k}_ms": 1.0 for k in ("mean", "p50", "p90", "p99", "max")}
    LatencyResult.check(pd.DataFrame([row]))  # without warmup_mean_ms: an optional column
    assert cases_of(LatencyResult, pd.DataFrame([{**row, "warmup_mean_ms": -1.0}])) == [("warmup_mean_ms", "greater_than_or_equal_to(0)", -1.0, 0)]


def test_a_row_check_names_each_failing_row_once():
    frame = pd.concat([tta_row(), tta_row(time_to_accuracy_hours=None, cost_usd=None), tta_row()], ignore_index=True)
    assert cases_of(TimeToAccuracyResult, frame) == [(None, "reached_has_a_time", None, 1)]


def test_what_no_number_of_its_type_can_hold_is_refused_not_cast():
    frame = pd.DataFrame({"epoch": pd.to_datetime(["2020-01-01"]), "hours": [0.1], "top1Accuracy": [50.0]})
    assert [c[:2] for c in cases_of(Top1Log, frame)] == [("epoch", "coerce_dtype('float64')")]  # a date is not a number of epochs
    for seed in (float("inf"), 2**70):
        assert [c[:3] for c in cases_of(TimeToAccuracyResult, tta_row(seed=seed))] == [("seed", "coerce_dtype('int64')", seed)]


def test_a_row_check_that_cannot_compare_its_columns_fails_as_a_whole():
    from dawnpipe.schemas.results import RunLog

    frame = pd.DataFrame({"epoch": [1.0], "hours": ["0.5"], "top1Accuracy": [50.0], "wall_hours": [0.25]})
    [(column, check, value, row)] = cases_of(RunLog, frame, ["wall_hours"])  # hours not converted: text against a number
    assert (column, check, row) == (None, "training_clock_within_wall_clock", None) and value.startswith("TypeError")


def test_a_parquet_log_is_checked_on_its_converted_columns(tmp_path):
    from dawnpipe.logs import read_run_parquet

    path = tmp_path / "train.parquet"
    pd.DataFrame({"epoch": [1.0], "hours": ["0.5"], "top1Accuracy": [50.0], "wall_hours": [0.25]}).to_parquet(path)
    with pytest.raises(DawnpipeError, match=r"row 1: training_clock_within_wall_clock failed"):
        read_run_parquet(path, get_task("fashion-mnist"))
