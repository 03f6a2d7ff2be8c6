"""fragbench's test kit for plugin authors (in progress)."""
