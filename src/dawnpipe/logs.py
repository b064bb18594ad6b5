"""Reading the per-epoch logs back (our own TSV/Parquet)."""

from __future__ import annotations

from pathlib import Path

import pandas as pd

from dawnpipe.errors import DawnpipeError
from dawnpipe.schemas.results import RunLog, log_model, validate

# A run trained with a held-out split (entry field held_out) logs its metric on
# it beside the test metric, as held_out_<metric column> (train.parquet/tsv).
HELD_OUT_PREFIX = "held_out_"
# A run whose entry asks for its task's new test set (new_test: true; CIFAR-10.1
# for CIFAR-10) logs its metric on that set as new_test_<metric column>.
NEW_TEST_PREFIX = "new_test_"


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
    frame = validate(log_model(task), frame, str(path))
    # the scores on a held-out split or a new test set, where the run has them: numbers, as the metric
    for column in (c for c in frame.columns if str(c).startswith((HELD_OUT_PREFIX, NEW_TEST_PREFIX))):
        if not pd.api.types.is_numeric_dtype(frame[column]) or pd.api.types.is_bool_dtype(frame[column]):
            raise DawnpipeError(f"{path}: column {column}: expected numbers, got {frame[column].dtype}")
    return validate(RunLog, frame, str(path), columns=run_columns)
