"""Datasets by name: registries in Harbor's format and the tasks they point at."""
