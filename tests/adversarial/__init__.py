"""The adversarial suite: a package, so its conftest.py (the attempt/fault tally) does not
shadow tests/conftest.py (`from conftest import ...`) in the rest of the suite."""
