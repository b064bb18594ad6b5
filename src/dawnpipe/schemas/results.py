"""Schemas of every result table, and of the per-epoch training logs
(``dawnpipe.schemas.tables``).

The training-log schemas are per task (the metric columns differ) and are the
same for our own runs and for audited submissions: ``log_model(task)``.
``validate(model, frame, source)`` turns the failures into one message
that names the file, the column and the rows.
"""

from __future__ import annotations

from collections.abc import Iterable

import pandas as pd

from dawnpipe.errors import DawnpipeError
from dawnpipe.schemas.tables import Column, Schema, TableErrors, row_check


# ---------------------------------------------------------------- training logs
class TrainLog(Schema, coerce=True):
    """DAWNBench v1 TSV: one row per (possibly fractional) epoch; hours cumulative.
    Extra columns are allowed (the auditor reports them separately)."""

    epoch = Column(float, ge=0)
    hours = Column(float, ge=0)


class Top1Log(TrainLog, coerce=True):
    top1Accuracy = Column(float, ge=0, le=100)


class ImageNetLog(TrainLog, coerce=True):
    top1Accuracy = Column(float, ge=0, le=100, nullable=True)
    top5Accuracy = Column(float, ge=0, le=100)


class SquadLog(TrainLog, coerce=True):
    f1Score = Column(float, ge=0, le=1)


_LOG_MODELS = {("top1Accuracy",): Top1Log, ("top1Accuracy", "top5Accuracy"): ImageNetLog, ("f1Score",): SquadLog}


def log_model(task) -> type[TrainLog]:
    return _LOG_MODELS[tuple(task.log_columns)]


class RunLog(Top1Log):
    """Our own Parquet log (image-classification tasks): the TSV columns and more."""

    wall_hours = Column(float, ge=0)
    # null where a program entry's run does not say (its loss, its rate and its items are inside the program)
    train_loss = Column(float, ge=0, nullable=True)
    eval_seconds = Column(float, ge=0)
    epoch_train_seconds = Column(float, ge=0)  # 0: an epoch that trained nothing (a program's, or its evaluation before training)
    lr = Column(float, ge=0, nullable=True)
    items_per_second = Column(float, gt=0, nullable=True)

    @row_check
    def training_clock_within_wall_clock(df: pd.DataFrame) -> pd.Series:
        return df["hours"] <= df["wall_hours"] + 1e-9


# ---------------------------------------------------------------- stage results
class TimeToAccuracyResult(Schema, coerce=True):
    """One row per training run (extract stage). Coerced: an unknown value
    (None) arrives as an object column."""

    entry = Column(str)
    seed = Column(int)
    task = Column(str)
    model = Column(str)
    framework = Column(str)
    hardware = Column(str)
    threshold = Column(float)
    official_threshold = Column(float)
    demo_threshold = Column(bool)
    reached = Column(bool)
    epochs_to_accuracy = Column(float, ge=0, nullable=True)  # 0: a program's model evaluated before any training
    time_to_accuracy_hours = Column(float, ge=0, nullable=True)
    wall_time_to_accuracy_hours = Column(float, ge=0, nullable=True)
    usd_per_hour = Column(float, ge=0, nullable=True)
    cost_usd = Column(float, ge=0, nullable=True)
    best_metric = Column(float)
    epochs_run = Column(float, ge=0)
    training_hours = Column(float, ge=0)

    @row_check
    def reached_has_a_time(df: pd.DataFrame) -> pd.Series:
        return df["reached"] == df["time_to_accuracy_hours"].notna()

    @row_check
    def time_within_training(df: pd.DataFrame) -> pd.Series:
        return df["time_to_accuracy_hours"].isna() | (df["time_to_accuracy_hours"] <= df["training_hours"] + 1e-12)


class LatencyResult(Schema, coerce=True):
    """One row per inference measurement: a run answered by one backend (infer
    stage). Columns not required are checked where present: the infer stage
    always writes them; records written by other tools may lack them."""

    entry = Column(str)
    seed = Column(int)
    task = Column(str)
    model = Column(str, required=False)
    framework = Column(str, required=False)
    hardware = Column(str, required=False)
    backend = Column(str)
    device = Column(str, required=False)
    precision = Column(str, required=False)
    threads = Column(int, ge=1)
    items = Column(int, gt=0)
    warmup_items = Column(int, ge=0)
    warmup_mean_ms = Column(float, ge=0, nullable=True, required=False)
    accuracy = Column(float, ge=0, le=100)
    threshold = Column(float, required=False)
    demo_threshold = Column(bool, required=False)
    meets_threshold = Column(bool)
    latency_mean_ms = Column(float, gt=0)
    latency_p50_ms = Column(float, gt=0)
    latency_p90_ms = Column(float, gt=0)
    latency_p99_ms = Column(float, gt=0)
    latency_max_ms = Column(float, gt=0)
    usd_per_hour = Column(float, ge=0, nullable=True)
    cost_per_10k_usd = Column(float, ge=0, nullable=True)

    @row_check
    def percentiles_ordered(df: pd.DataFrame) -> pd.Series:
        return (df["latency_p50_ms"] <= df["latency_p90_ms"]) & (df["latency_p90_ms"] <= df["latency_p99_ms"]) & (df["latency_p99_ms"] <= df["latency_max_ms"])


class StabilityResult(Schema, coerce=True):
    """One row per entry (stability stage)."""

    entry = Column(str)
    runs = Column(int, ge=1)
    reached_runs = Column(int, ge=0)
    reached_fraction = Column(float, ge=0, le=1)
    tta_mean_hours = Column(float, ge=0, nullable=True)
    tta_std_hours = Column(float, ge=0, nullable=True)
    tta_cov = Column(float, ge=0, nullable=True)
    olympic_tta_hours = Column(float, ge=0, nullable=True)


def validate(model: type[Schema], frame: pd.DataFrame, source: str, columns: Iterable[str] | None = None) -> pd.DataFrame:
    """Validate ``frame`` (``columns``: only these of the model's, and its row
    checks); on failure raise one DawnpipeError naming file, columns and rows."""
    try:
        return model.check(frame, columns)
    except TableErrors as err:
        raise DawnpipeError(f"{source}: {describe_failures(err.cases)}") from None


def describe_failures(cases: pd.DataFrame, limit: int = 5) -> str:
    """'column top1Accuracy, row 3: less_than_or_equal_to(100) failed for 104.2; ...'"""
    parts = []
    for _, case in cases.head(limit).iterrows():
        column = case.get("column")
        index = case.get("index")
        where = []
        if column is not None and not pd.isna(column):
            where.append(f"column {column}")
        if index is not None and not pd.isna(index):
            where.append(f"row {int(index) + 1}")
        check = case.get("check")
        value = case.get("failure_case")
        parts.append(f"{', '.join(where) or 'table'}: {check} failed" + ("" if value is None or pd.isna(value) else f" for {value!r}"))
    more = len(cases) - limit
    return "; ".join(parts) + (f"; and {more} more" if more > 0 else "")
