"""Reading the per-epoch logs back (our own TSV/Parquet)."""

from __future__ import annotations

from pathlib import Path

import pandas as pd

from dawnpipe.errors import DawnpipeError
from dawnpipe.schemas.results import log_model, validate


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
