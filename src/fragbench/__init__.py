"""fragbench."""
