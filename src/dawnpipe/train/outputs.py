"""Where a training run writes, and how its threshold checkpoint reaches the
declared output, the same for every trainer.

The work directory holds everything a restarted job needs, until train.cli has
written the last output (run.json) and removes it. So the threshold
checkpoint is *copied* out of it (to a temporary beside the output, then
renamed), never moved: a job killed after the copy but before run.json is
written still finds ``<work>/threshold.*`` when it is retried, and completes.
"""

from __future__ import annotations

import shutil
from dataclasses import dataclass
from pathlib import Path

from dawnpipe.errors import DawnpipeError
from dawnpipe.fileio import atomic_path


@dataclass(frozen=True)
class Outputs:
    tsv: Path
    parquet: Path
    checkpoint: Path
    run_json: Path
    work_dir: Path
    mllog: Path | None = None  # the run's MLLOG (dawnpipe.train.mllog_writer), written when the run completes


def publish_checkpoint(work_copy: Path, output: Path) -> None:
    """Copy ``work_copy`` to ``output`` atomically; the work copy stays until the work directory is removed."""
    if not work_copy.is_file():
        raise DawnpipeError(
            f"{work_copy}: the threshold checkpoint is missing from the work directory (removed by hand?); rerun with --no-resume to train again"
        )
    with atomic_path(output) as tmp:
        shutil.copyfile(work_copy, tmp)
