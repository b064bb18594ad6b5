"""Reading the per-epoch logs back (our own TSV/Parquet)."""

from __future__ import annotations

from pathlib import Path

import pandas as pd

from dawnpipe.errors import DawnpipeError
from dawnpipe.schemas.results import RunLog, log_model, validate


def read_run_tsv(path: Path, task) -> pd.DataFrame:
    try:
        frame = pd.read_csv(path, sep="\t")
    except (pd.errors.ParserError, pd.errors.EmptyDataError, UnicodeDecodeError) as e:
        raise DawnpipeError(f"{path}: not a readable TSV ({e})") from None
    missing = [c for c in ("epoch", "hours", *task.log_columns) if c not in frame.columns]
    if missing:
        raise DawnpipeError(f"{path}: missing column(s) {', '.join(missing)}")
    if frame.empty:
        raise DawnpipeError(f"{path}: no epochs logged")
    return validate(log_model(task), frame, str(path))


def read_run_parquet(path: Path, task, columns: tuple[str, ...] = ()) -> pd.DataFrame:
    """A run's train.parquet, checked: the task's log columns, the wall clock
    and ``columns`` (of RunLog: what the caller reads), each present and of
    its type, so a truncated, hand-edited or foreign file is one line naming
    it and the column, not a KeyError later."""
    import pyarrow

    try:
        frame = pd.read_parquet(path)
    except (ValueError, pyarrow.ArrowException) as e:
        raise DawnpipeError(f"{path}: not a readable Parquet file ({str(e)[:160]})") from None
    run_columns = ["wall_hours", *columns]
    missing = [c for c in ("epoch", "hours", *task.log_columns, *run_columns) if c not in frame.columns]
    if missing:
        raise DawnpipeError(f"{path}: missing column(s) {', '.join(missing)}")
    if frame.empty:
        raise DawnpipeError(f"{path}: no epochs logged")
    validate(log_model(task), frame, str(path))
    return validate(RunLog.to_schema().select_columns(run_columns), frame, str(path))
