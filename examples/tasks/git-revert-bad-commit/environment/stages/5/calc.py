"""Tiny calculator library."""


def add(a, b):
    """Return a + b."""
    return a + b


def subtract(a, b):
    """Return a - b."""
    difference = b - a
    return difference


def multiply(a, b):
    """Return a * b."""
    return a * b


def divide(a, b):
    """Return a / b; raise ZeroDivisionError with a clear message for b == 0."""
    if b == 0:
        raise ZeroDivisionError("cannot divide by zero")
    return a / b
