"""Training: one entry, one seed, one per-epoch log (see dawnpipe.train.cli)."""

from dawnpipe.errors import DawnpipeError


class EntryError(DawnpipeError):
    """A field of the entry being trained is wrong. The trainers know the
    entry, not its file: the message starts with the field, and train.cli
    puts the entry file's path in front."""
