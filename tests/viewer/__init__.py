"""Viewer tests: a package, so its conftest.py does not shadow tests/conftest.py
(`from conftest import ...`) in the rest of the suite."""
