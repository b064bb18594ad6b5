"""Training: one entry, one seed, one per-epoch log (see dawnpipe.train.cli)."""
