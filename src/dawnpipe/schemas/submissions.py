"""Schemas (``dawnpipe.schemas.tables``) of DAWNBench v1 submission metadata
(docs/rules.md#dawnbench-v1-submissions).

One row per submission JSON. Which fields a submission must have is decided
here and nowhere else: a column that is not ``nullable`` is a required field
(the auditor reads the list from the schema). The per-epoch training logs are
checked by the per-task schemas of ``dawnpipe.schemas.results``
(``log_model(task)``), shared with our own runs.

Types are settled before a frame is built (a JSON string where a number
belongs is reported by the loader, by field); these models check values:
non-empty names, a real date, prices and latencies in range, the quality
metric on its scale.
"""

from __future__ import annotations

import pandas as pd

from dawnpipe.schemas.tables import Column, Schema, column_check, row_check

# Zero-padding is a harmless quirk (2018-4-20): the loader warns and normalizes.
DATE_PATTERN = r"^\d{4}-\d{1,2}-\d{1,2}$"


class SubmissionMetadata(Schema):
    """Fields every DAWNBench v1 submission JSON has (training and inference).
    Unknown extra fields are a warning, reported by the loader."""

    version = Column(str, isin=("v1.0",))
    author = Column(str, min_length=1)
    authorEmail = Column(str, min_length=1)
    framework = Column(str, min_length=1)
    model = Column(str, min_length=1)
    hardware = Column(str, min_length=1)
    timestamp = Column(str, matches=DATE_PATTERN)
    codeURL = Column(str, nullable=True)
    logFilename = Column(str, nullable=True)
    costPerHour = Column(float, ge=0, nullable=True)  # USD per hour, on demand

    @column_check("timestamp")
    def is_a_calendar_date(s: pd.Series) -> pd.Series:
        return pd.to_datetime(s, format="%Y-%m-%d", errors="coerce").notna()


class TrainingSubmission(SubmissionMetadata):
    """``<Task>/train/<name>.json``: the metadata of a training run (its log is the TSV)."""


class InferenceSubmission(SubmissionMetadata):
    """``<Task>/inference/<name>.json``: latency (ms per item), cost (USD per item) and quality."""

    latency = Column(float, gt=0, nullable=True)
    cost = Column(float, ge=0, nullable=True)

    @row_check
    def has_latency_or_cost(df: pd.DataFrame) -> pd.Series:
        return df["latency"].notna() | df["cost"].notna()


class Top1Inference(InferenceSubmission):
    top1Accuracy = Column(float, ge=0, le=100)


class Top5Inference(InferenceSubmission):
    top5Accuracy = Column(float, ge=0, le=100)


class F1Inference(InferenceSubmission):
    f1Score = Column(float, ge=0, le=1)


_INFERENCE_MODELS = {"top1Accuracy": Top1Inference, "top5Accuracy": Top5Inference, "f1Score": F1Inference}


def inference_model(task) -> type[InferenceSubmission]:
    return _INFERENCE_MODELS[task.inference_accuracy_field]


def field_types(model: type[Schema]) -> dict[str, tuple[type, bool]]:
    """{field: (python type, required)} of a metadata schema, in declaration order."""
    return {name: (float if column.dtype is float else str, not column.nullable) for name, column in model.columns.items()}


class AuditMessages(Schema):
    """``dawnpipe audit --parquet``: one row per message; a file without messages has one row with none."""

    path = Column(str)
    source = Column(str)
    task = Column(str, nullable=True)
    kind = Column(str, isin=("train-json", "train-tsv", "inference", "other"))
    status = Column(str, isin=("ok", "warning", "error"))
    severity = Column(str, isin=("info", "warning", "error"), nullable=True)
    code = Column(str, nullable=True)
    where = Column(str, nullable=True)
    message = Column(str, nullable=True)
