"""fragbench-token-window (in progress)."""
