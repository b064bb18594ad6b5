"""dawnpipe: a reproducible DAWNBench-style time-to-accuracy benchmark pipeline.

Every stage is a module with a pure core and a thin command line, run as
``python -m dawnpipe <stage> ...`` (see ``dawnpipe --help``).
"""

__version__ = "0.1.0"
