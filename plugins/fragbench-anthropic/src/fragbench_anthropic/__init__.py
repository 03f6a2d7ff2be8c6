"""fragbench-anthropic (in progress)."""
