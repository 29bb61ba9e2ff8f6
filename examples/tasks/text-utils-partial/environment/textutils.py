"""Small text helpers. Implement the functions below."""


def slugify(text: str) -> str:
    raise NotImplementedError


def is_palindrome(text: str) -> bool:
    raise NotImplementedError


def word_frequencies(text: str) -> dict:
    raise NotImplementedError


def caesar(text: str, shift: int) -> str:
    raise NotImplementedError
