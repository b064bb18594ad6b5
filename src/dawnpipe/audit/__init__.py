"""Auditing DAWNBench v1 submissions (docs/rules.md#dawnbench-v1-submissions):
``audit(paths)`` gives every file a status (ok, warning, error) and messages
naming the file, the field or line, and the reason, plus the figures
recomputed from the logs.

Nothing a submission names is ever opened, fetched or run: only the files of
the layout ``<Task>/train/<name>.json + .tsv`` and ``<Task>/inference/<name>.json``
are read, each under a size cap.
"""
