"""Semantic version utilities. See /app/spec.md."""


def is_valid(version: str) -> bool:
    raise NotImplementedError


def compare(a: str, b: str) -> int:
    raise NotImplementedError


def sort_versions(versions: list) -> list:
    raise NotImplementedError
