"""A seeded generator of hostile inputs for the differential fuzz (``tests/test_fuzz.py``).

Strings are built from pieces of many kinds: ASCII words and names, accented words composed (NFC) and
decomposed (NFD), CJK, emoji with ZWJ sequences, skin tones and flags, right-to-left scripts, whitespace of every
kind, control characters, punctuation and digits, and the special-token literals ``[SEP]``/``[MASK]``/``[PAD]``/
``[CLS]``/``[UNK]``. Lengths run from the empty string and one character to 2,000 words. The same seed gives
the same inputs on every machine (``random.Random``, no hashing of strings).
"""

from __future__ import annotations

import random
import unicodedata
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

WORDS = ["the", "city", "of", "paris", "met", "river", "unbelievably", "co-operate", "x-ray", "don't", "U.S.A."]
NAMES = ["Angela", "Merkel", "Emmanuel", "Macron", "Zürich", "Berlin", "São", "Paulo", "McDonald's"]
ACCENTED = ["café", "crème", "brûlée", "naïve", "Ångström", "résumé", "façade", "Škoda", "Łódź"]
CJK = ["東京", "大阪", "汉字", "中文", "日本語", "한국어", "漢"]
EMOJI = ["🙂", "👨\u200d👩\u200d👧", "👍🏽", "🇫🇷", "❤️", "🏳️\u200d🌈", "🤖"]
RTL = ["مرحبا", "שלום", "العالم", "עברית", "\u200fRTL\u200e"]
SPACES = [" ", "  ", "\t", "\n", "\r\n", "\u00a0", "\u3000", "\u2003", "\u200b", "\ufeff"]
CONTROLS = ["\x00", "\x01", "\x07", "\x1b", "\x7f", "\u0085", "\u200d"]
PUNCTUATION = [".", ",", "!", "?", ";", ":", "(", ")", "«", "»", "—", "…", "'", '"', "#", "##", "@"]
SPECIALS = ["[SEP]", "[MASK]", "[PAD]", "[CLS]", "[UNK]"]
DIGITS = ["2019", "3.14", "1,000", "42", "٣"]

#: Piece kinds and their weights in a text.
KINDS: list[tuple[list[str], int]] = [
    (WORDS, 8),
    (NAMES, 4),
    (ACCENTED, 3),
    (CJK, 2),
    (EMOJI, 2),
    (RTL, 1),
    (SPACES, 3),
    (CONTROLS, 1),
    (PUNCTUATION, 3),
    (SPECIALS, 1),
    (DIGITS, 1),
]
LONG_WORDS = 2000


@dataclass
class Fuzz:
    """Hostile strings from one seed."""

    seed: int

    def __post_init__(self) -> None:
        self.random = random.Random(self.seed)

    def piece(self) -> str:
        pools, weights = zip(*KINDS, strict=True)
        pool = self.random.choices(pools, weights=weights)[0]
        text = self.random.choice(pool)
        if pool is ACCENTED and self.random.random() < 0.5:
            text = unicodedata.normalize("NFD", text)
        return text

    def text(self, words: int | None = None, *, specials: bool = True) -> str:
        """A text of ``words`` pieces (default: a random length from 0 to 40, sometimes 2,000 words)."""
        if words is None:
            roll = self.random.random()
            words = (
                0 if roll < 0.05 else 1 if roll < 0.12 else LONG_WORDS if roll < 0.17 else self.random.randint(2, 40)
            )
        if words == 0:
            return self.random.choice(["", "", " ", "\t\n", "\x00"])
        parts = []
        for _ in range(words):
            piece = self.piece()
            while not specials and piece in SPECIALS:
                piece = self.piece()
            parts.append(piece)
            parts.append(self.random.choice([" ", " ", " ", "", self.random.choice(SPACES)]))
        return "".join(parts)

    def pair(self) -> tuple[str, str]:
        """Two texts; the second is exactly empty one time in eight; both are over 512 tokens one time in ten
        (300-700 pieces: longer pairs cost the reference quadratic time, ``tokenizers`` pairing every overflow
        window of one side with every window of the other)."""
        if self.random.random() < 0.1:
            return self.text(self.random.randint(300, 700)), self.text(self.random.randint(300, 700))
        first = self.text()
        return first, "" if self.random.random() < 0.125 else self.text()

    def masked(self, max_words: int = 60) -> str:
        """A text under 512 tokens holding one to three ``[MASK]`` (and maybe ``[PAD]`` literals)."""
        words = self.random.randint(0, max_words)
        base = self.text(words, specials=False) if words else ""
        pieces = base.split(" ")
        for _ in range(self.random.choice([1, 1, 2, 3])):
            pieces.insert(self.random.randint(0, len(pieces)), "[MASK]")
        if self.random.random() < 0.3:
            pieces.insert(self.random.randint(0, len(pieces)), "[PAD]")
        return " ".join(pieces)

    def choice(self, options: list[Any]) -> Any:
        return self.random.choice(options)


def cases(seed: int, count: int, make: Any) -> Iterator[Any]:
    """``count`` inputs from ``make(fuzz)``, from one seed."""
    fuzz = Fuzz(seed)
    for _ in range(count):
        yield make(fuzz)
