"""pytest plugin of the fragbench test kit (in progress)."""
