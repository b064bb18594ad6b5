"""The report stage: leaderboard JSON + a self-contained HTML page + a table of all runs."""
