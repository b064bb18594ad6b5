"""Training: one entry, one seed, one per-epoch log (see dawnpipe.train.cli)."""

from __future__ import annotations

import contextlib
from collections.abc import Mapping
from pathlib import Path
from typing import TYPE_CHECKING, Any, Protocol, runtime_checkable

from dawnpipe.errors import DawnpipeError

if TYPE_CHECKING:
    from dawnpipe.train.finish import FinishedRun
    from dawnpipe.train.outputs import Outputs
    from dawnpipe.train.settings import Entry, RunSettings

# (kind of items of the entry's task, its framework) -> the module that trains it
# (a TrainerModule), imported only when used.
TRAINERS = {
    ("image", "pytorch"): "dawnpipe.train.torch_trainer",
    ("image", "tensorflow"): "dawnpipe.train.tf_trainer",
    ("question", "pytorch"): "dawnpipe.train.squad_trainer",
    ("image", "program"): "dawnpipe.train.program",  # somebody's own program (docs/programs.md)
}
DATA_PARALLEL = {"dawnpipe.train.torch_trainer"}  # trainers that train with several processes (distributed:)


@runtime_checkable
class TrainerModule(Protocol):
    """What every module of TRAINERS is: train.cli calls ``check_entry`` once
    the entry is read (before any data is read or process started), then
    ``train`` in each process of the run. A data-parallel trainer
    (DATA_PARALLEL) also takes ``rank=`` (dawnpipe.train.distributed.Rank)."""

    def check_entry(self, entry: Entry) -> None:
        """Raise EntryError (a message that starts with the field) for what this trainer cannot train."""

    def train(self, settings: RunSettings, data_dir: Path, out: Outputs, *, threads: int | None = None, resume: bool = True) -> FinishedRun | None:
        """Train the run of ``settings`` on the prepared data in ``data_dir``, writing ``out`` (resuming from
        ``out.work_dir`` unless ``resume`` is false); what it did, on the process that writes, else None."""


class EntryError(DawnpipeError):
    """A field of the entry being trained is wrong. The trainers know the
    entry, not its file: the message starts with the field, and train.cli
    puts the entry file's path in front."""


@contextlib.contextmanager
def naming_the_model(model: str, model_args: Mapping[str, Any]):
    """Building an entry's network (either framework's zoo): an unknown
    ``model`` or a bad ``model_args`` is an EntryError naming both."""
    try:
        yield
    except (ValueError, TypeError) as e:  # unknown name, depth or key (TypeError: an unexpected keyword argument)
        raise EntryError(f"model {model!r} with model_args {model_args}: {e}") from None
