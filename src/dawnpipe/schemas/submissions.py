"""pandera schemas of DAWNBench v1 submission metadata
(docs/rules.md#dawnbench-v1-submissions).

One row per submission JSON. Which fields a submission must have is decided
here and nowhere else: a column that is not ``nullable`` is a required field
(the auditor reads the list from the model). The per-epoch training logs are
checked by the per-task models of ``dawnpipe.schemas.results``
(``log_model(task)``), shared with our own runs.

Types are settled before a frame is built (a JSON string where a number
belongs is reported by the loader, by field); these models check values:
non-empty names, a real date, prices and latencies in range, the quality
metric on its scale.
"""

from __future__ import annotations

import pandas as pd
import pandera.pandas as pa
from pandera.typing.pandas import Series

# Zero-padding is a harmless quirk (2018-4-20): the loader warns and normalizes.
DATE_PATTERN = r"^\d{4}-\d{1,2}-\d{1,2}$"


class SubmissionMetadata(pa.DataFrameModel):
    """Fields every DAWNBench v1 submission JSON has (training and inference)."""

    version: Series[str] = pa.Field(isin=["v1.0"])
    author: Series[str] = pa.Field(str_length={"min_value": 1})
    authorEmail: Series[str] = pa.Field(str_length={"min_value": 1})
    framework: Series[str] = pa.Field(str_length={"min_value": 1})
    model: Series[str] = pa.Field(str_length={"min_value": 1})
    hardware: Series[str] = pa.Field(str_length={"min_value": 1})
    timestamp: Series[str] = pa.Field(str_matches=DATE_PATTERN)
    codeURL: Series[str] = pa.Field(nullable=True)
    logFilename: Series[str] = pa.Field(nullable=True)
    costPerHour: Series[float] = pa.Field(ge=0, nullable=True)  # USD per hour, on demand

    @pa.check("timestamp", name="is_a_calendar_date")
    def is_a_calendar_date(cls, s: Series[str]) -> Series[bool]:
        return pd.to_datetime(s, format="%Y-%m-%d", errors="coerce").notna()

    class Config:
        strict = False  # unknown extra fields are a warning, reported by the loader


class TrainingSubmission(SubmissionMetadata):
    """``<Task>/train/<name>.json``: the metadata of a training run (its log is the TSV)."""


class InferenceSubmission(SubmissionMetadata):
    """``<Task>/inference/<name>.json``: latency (ms per item), cost (USD per item) and quality."""

    latency: Series[float] = pa.Field(gt=0, nullable=True)
    cost: Series[float] = pa.Field(ge=0, nullable=True)

    @pa.dataframe_check(name="has_latency_or_cost")
    def has_latency_or_cost(cls, df: pd.DataFrame) -> Series[bool]:
        return df["latency"].notna() | df["cost"].notna()


class Top1Inference(InferenceSubmission):
    top1Accuracy: Series[float] = pa.Field(ge=0, le=100)


class Top5Inference(InferenceSubmission):
    top5Accuracy: Series[float] = pa.Field(ge=0, le=100)


class F1Inference(InferenceSubmission):
    f1Score: Series[float] = pa.Field(ge=0, le=1)


_INFERENCE_MODELS = {"top1Accuracy": Top1Inference, "top5Accuracy": Top5Inference, "f1Score": F1Inference}


def inference_model(task) -> type[InferenceSubmission]:
    return _INFERENCE_MODELS[task.inference_accuracy_field]


def field_types(model: type[pa.DataFrameModel]) -> dict[str, tuple[type, bool]]:
    """{field: (python type, required)} of a metadata model, in declaration order."""
    out = {}
    for name, column in model.to_schema().columns.items():
        kind = float if "float" in str(column.dtype) else str
        out[name] = (kind, not column.nullable)
    return out


class AuditMessages(pa.DataFrameModel):
    """``dawnpipe audit --parquet``: one row per message; a file without messages has one row with none."""

    path: Series[str]
    source: Series[str]
    task: Series[str] = pa.Field(nullable=True)
    kind: Series[str] = pa.Field(isin=["train-json", "train-tsv", "inference", "other"])
    status: Series[str] = pa.Field(isin=["ok", "warning", "error"])
    severity: Series[str] = pa.Field(isin=["info", "warning", "error"], nullable=True)
    code: Series[str] = pa.Field(nullable=True)
    where: Series[str] = pa.Field(nullable=True)
    message: Series[str] = pa.Field(nullable=True)
