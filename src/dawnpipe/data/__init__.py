"""Data stages: fetch (download/copy + verify) and prepare (decode once)."""
