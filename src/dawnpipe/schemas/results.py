"""pandera schemas of every result table, and of the per-epoch training logs.

The training-log models are per task (the metric columns differ) and are the
same for our own runs and for audited submissions: ``log_model(task)``.
``validate(model, frame, source)`` turns pandera's errors into one message
that names the file, the column and the rows.
"""

from __future__ import annotations

import pandas as pd
import pandera.pandas as pa
from pandera.typing.pandas import Series

from dawnpipe.errors import DawnpipeError


# ---------------------------------------------------------------- training logs
class TrainLog(pa.DataFrameModel):
    """DAWNBench v1 TSV: one row per (possibly fractional) epoch; hours cumulative."""

    epoch: Series[float] = pa.Field(ge=0, coerce=True)
    hours: Series[float] = pa.Field(ge=0, coerce=True)

    class Config:
        strict = False  # extra columns are allowed (reported separately by the auditor)


class Top1Log(TrainLog):
    top1Accuracy: Series[float] = pa.Field(ge=0, le=100, coerce=True)


class ImageNetLog(TrainLog):
    top1Accuracy: Series[float] = pa.Field(ge=0, le=100, coerce=True, nullable=True)
    top5Accuracy: Series[float] = pa.Field(ge=0, le=100, coerce=True)


class SquadLog(TrainLog):
    f1Score: Series[float] = pa.Field(ge=0, le=1, coerce=True)


_LOG_MODELS = {("top1Accuracy",): Top1Log, ("top1Accuracy", "top5Accuracy"): ImageNetLog, ("f1Score",): SquadLog}


def log_model(task) -> type[TrainLog]:
    return _LOG_MODELS[tuple(task.log_columns)]


class RunLog(Top1Log):
    """Our own Parquet log (image-classification tasks): the TSV columns and more."""

    wall_hours: Series[float] = pa.Field(ge=0)
    # null where a program entry's run does not say (its loss, its rate and its items are inside the program)
    train_loss: Series[float] = pa.Field(ge=0, nullable=True)
    eval_seconds: Series[float] = pa.Field(ge=0)
    epoch_train_seconds: Series[float] = pa.Field(ge=0)  # 0: an epoch that trained nothing (a program's, or its evaluation before training)
    lr: Series[float] = pa.Field(ge=0, nullable=True)
    items_per_second: Series[float] = pa.Field(gt=0, nullable=True)

    @pa.dataframe_check
    def training_clock_within_wall_clock(cls, df: pd.DataFrame) -> Series[bool]:
        return df["hours"] <= df["wall_hours"] + 1e-9


# ---------------------------------------------------------------- stage results
class TimeToAccuracyResult(pa.DataFrameModel):
    """One row per training run (extract stage)."""

    class Config:
        coerce = True  # an unknown value (None) arrives as an object column

    entry: Series[str]
    seed: Series[int]
    task: Series[str]
    model: Series[str]
    framework: Series[str]
    hardware: Series[str]
    threshold: Series[float]
    official_threshold: Series[float]
    demo_threshold: Series[bool]
    reached: Series[bool]
    epochs_to_accuracy: Series[float] = pa.Field(ge=0, nullable=True)  # 0: a program's model evaluated before any training
    time_to_accuracy_hours: Series[float] = pa.Field(ge=0, nullable=True)
    wall_time_to_accuracy_hours: Series[float] = pa.Field(ge=0, nullable=True)
    usd_per_hour: Series[float] = pa.Field(ge=0, nullable=True)
    cost_usd: Series[float] = pa.Field(ge=0, nullable=True)
    best_metric: Series[float]
    epochs_run: Series[float] = pa.Field(ge=0)
    training_hours: Series[float] = pa.Field(ge=0)

    @pa.dataframe_check
    def reached_has_a_time(cls, df: pd.DataFrame) -> Series[bool]:
        return df["reached"] == df["time_to_accuracy_hours"].notna()

    @pa.dataframe_check
    def time_within_training(cls, df: pd.DataFrame) -> Series[bool]:
        return df["time_to_accuracy_hours"].isna() | (df["time_to_accuracy_hours"] <= df["training_hours"] + 1e-12)


class LatencyResult(pa.DataFrameModel):
    """One row per inference measurement: a run answered by one backend (infer
    stage). Columns typed Optional are checked where present: the infer stage
    always writes them; records written by other tools may lack them."""

    class Config:
        coerce = True  # an unknown value (None) arrives as an object column

    entry: Series[str]
    seed: Series[int]
    task: Series[str]
    model: Series[str] | None
    framework: Series[str] | None
    hardware: Series[str] | None
    backend: Series[str]
    device: Series[str] | None
    precision: Series[str] | None
    threads: Series[int] = pa.Field(ge=1)
    items: Series[int] = pa.Field(gt=0)
    warmup_items: Series[int] = pa.Field(ge=0)
    warmup_mean_ms: Series[float] | None = pa.Field(ge=0, nullable=True)
    accuracy: Series[float] = pa.Field(ge=0, le=100)
    threshold: Series[float] | None
    demo_threshold: Series[bool] | None
    meets_threshold: Series[bool]
    latency_mean_ms: Series[float] = pa.Field(gt=0)
    latency_p50_ms: Series[float] = pa.Field(gt=0)
    latency_p90_ms: Series[float] = pa.Field(gt=0)
    latency_p99_ms: Series[float] = pa.Field(gt=0)
    latency_max_ms: Series[float] = pa.Field(gt=0)
    usd_per_hour: Series[float] = pa.Field(ge=0, nullable=True)
    cost_per_10k_usd: Series[float] = pa.Field(ge=0, nullable=True)

    @pa.dataframe_check
    def percentiles_ordered(cls, df: pd.DataFrame) -> Series[bool]:
        return (df["latency_p50_ms"] <= df["latency_p90_ms"]) & (df["latency_p90_ms"] <= df["latency_p99_ms"]) & (df["latency_p99_ms"] <= df["latency_max_ms"])


class StabilityResult(pa.DataFrameModel):
    """One row per entry (stability stage)."""

    class Config:
        coerce = True  # an unknown value (None) arrives as an object column

    entry: Series[str]
    runs: Series[int] = pa.Field(ge=1)
    reached_runs: Series[int] = pa.Field(ge=0)
    reached_fraction: Series[float] = pa.Field(ge=0, le=1)
    tta_mean_hours: Series[float] = pa.Field(ge=0, nullable=True)
    tta_std_hours: Series[float] = pa.Field(ge=0, nullable=True)
    tta_cov: Series[float] = pa.Field(ge=0, nullable=True)
    olympic_tta_hours: Series[float] = pa.Field(ge=0, nullable=True)


def validate(model: type[pa.DataFrameModel], frame: pd.DataFrame, source: str) -> pd.DataFrame:
    """Validate ``frame``; on failure raise one DawnpipeError naming file, columns and rows."""
    try:
        return model.validate(frame, lazy=True)
    except pa.errors.SchemaErrors as err:
        raise DawnpipeError(f"{source}: {describe_failures(err.failure_cases)}") from None


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
