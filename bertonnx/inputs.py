"""What the Python surface takes as inputs: a string, or an ordered iterable of strings, checked lazily.

Kept apart from :mod:`bertonnx.model` so the checks read in one place: a single string is one input; lists,
tuples, numpy arrays of str and generators pass through (checked item by item as they are read); sets (no
order for the results to follow), mappings and their views (a dict would be read as its keys) and bytes are
refused with a ``TypeError`` saying what to pass instead.
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator, Mapping, MappingView, Set

__all__ = ["as_texts", "checked_texts", "text_list"]


def as_texts(value: object, name: str) -> Iterable[str]:
    """``value`` as an iterable of inputs (one string: a one-item list), not yet checked item by item.

    Raises:
        TypeError: a mapping or its view, a set, bytes, or not an iterable.
    """
    if isinstance(value, str):
        return [value]
    if isinstance(value, (Mapping, MappingView)):
        raise TypeError(
            f"{name} is a {type(value).__name__}: a mapping or a view of one is not taken as texts (a dict "
            "would be read as its keys); pass a list of str, e.g. list(d.values())"
        )
    if isinstance(value, Set):
        raise TypeError(
            f"{name} is a {type(value).__name__}, which has no order for the results to follow; pass a list "
            "of str, e.g. sorted(...)"
        )
    if isinstance(value, (bytes, bytearray)) or not isinstance(value, Iterable):
        raise TypeError(f"{name} must be a str or an iterable of str, got {type(value).__name__}")
    return value


def checked_texts(items: Iterable[object], name: str) -> Iterator[str]:
    """Each item, raising ``TypeError`` naming the first that is not a string."""
    for index, item in enumerate(items):
        if not isinstance(item, str):
            got = "None" if item is None else type(item).__name__
            raise TypeError(f"{name}[{index}] is {got}; every input must be a str")
        yield item


def text_list(value: object, name: str) -> list[str]:
    """``value`` read whole as a checked list of strings (see :func:`as_texts`)."""
    return list(checked_texts(as_texts(value, name), name))
