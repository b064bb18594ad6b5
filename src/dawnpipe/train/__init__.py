"""Training: one entry, one seed, one per-epoch log (see dawnpipe.train.cli)."""

import contextlib
from typing import Any

from dawnpipe.errors import DawnpipeError

# (kind of items of the entry's task, its framework) -> the module that trains it
# (``check_entry``, ``train``), imported only when used.
TRAINERS = {
    ("image", "pytorch"): "dawnpipe.train.torch_trainer",
    ("image", "tensorflow"): "dawnpipe.train.tf_trainer",
    ("question", "pytorch"): "dawnpipe.train.squad_trainer",
    ("image", "program"): "dawnpipe.train.program",  # somebody's own program (docs/programs.md)
}
DATA_PARALLEL = {"dawnpipe.train.torch_trainer"}  # trainers that train with several processes (distributed:)


class EntryError(DawnpipeError):
    """A field of the entry being trained is wrong. The trainers know the
    entry, not its file: the message starts with the field, and train.cli
    puts the entry file's path in front."""


@contextlib.contextmanager
def naming_the_model(entry: dict[str, Any]):
    """Building the entry's network (either framework's zoo): an unknown
    ``model`` or a bad ``model_args`` is an EntryError naming both."""
    try:
        yield
    except (ValueError, TypeError) as e:  # unknown name, depth or key (TypeError: an unexpected keyword argument)
        raise EntryError(f"model {entry['model']!r} with model_args {entry['model_args']}: {e}") from None
