"""MLPerf Training results: read, scored and checked with MLCommons' own
mlperf-logging package (official.py is the only module that calls it)."""
