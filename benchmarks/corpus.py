"""A deterministic corpus of real-looking English texts and sentence pairs, 8 to 256 tokens long.

Built from a word list and a seed (no downloads), so every machine times the same inputs. Words are
common lowercase English words that the uncased WordPiece vocabulary holds whole, so the number of
tokens tracks the number of words and punctuation marks closely; the worker reports the real lengths.
"""

from __future__ import annotations

import numpy as np

DEFAULT_CORPUS_SIZE = 1000
QUICK_CORPUS_SIZE = 200
DEFAULT_CORPUS_SEED = 0
MIN_TOKENS = 8
MAX_TOKENS = 256
#: ``[CLS] A [SEP]`` and ``[CLS] A [SEP] B [SEP]``.
SPECIAL_SINGLE = 2
SPECIAL_PAIR = 3

SUBJECTS = (
    "the old man",
    "my sister",
    "the committee",
    "our team",
    "the new teacher",
    "a young doctor",
    "the city council",
    "his brother",
    "the small company",
    "every student",
    "the local farmer",
    "this report",
    "the river",
    "the weather",
    "the government",
    "a group of children",
    "the manager",
    "her friend",
    "the museum",
    "the train",
)
VERBS = (
    "visited",
    "described",
    "found",
    "changed",
    "opened",
    "followed",
    "built",
    "watched",
    "explained",
    "moved",
    "reached",
    "discussed",
    "remembered",
    "finished",
    "carried",
    "supported",
    "answered",
    "closed",
    "studied",
    "left",
)
OBJECTS = (
    "the house",
    "a long letter",
    "the market",
    "the whole story",
    "the old bridge",
    "a new road",
    "the garden",
    "the final plan",
    "the north coast",
    "a small boat",
    "the early results",
    "the village school",
    "the public park",
    "the main station",
    "a short film",
    "the large window",
    "the last question",
    "the family farm",
    "the hospital",
)
TAILS = (
    "after the long winter",
    "before the meeting began",
    "in the morning",
    "during the summer",
    "with great care",
    "for the first time",
    "near the end of the year",
    "without any help",
    "on a cold day",
    "at the same time",
    "because of the rain",
    "while the others waited",
    "in the early evening",
    "across the valley",
    "by the river",
)
CONNECTORS = ("however", "later", "then", "meanwhile", "still", "also", "finally", "as a result")


def _sentence(rng: np.random.Generator) -> str:
    parts = [str(rng.choice(SUBJECTS)), str(rng.choice(VERBS)), str(rng.choice(OBJECTS))]
    if rng.random() < 0.7:
        parts.append(str(rng.choice(TAILS)))
    if rng.random() < 0.3:
        parts.insert(0, f"{rng.choice(CONNECTORS)},")
    text = " ".join(parts)
    return text[0].upper() + text[1:] + ("." if rng.random() < 0.85 else "!")


def _approx_tokens(text: str) -> int:
    """Whole-word tokens plus punctuation marks (every word in the lists is one WordPiece token)."""
    return len(text.split()) + sum(text.count(mark) for mark in ".,!")


def _passage(rng: np.random.Generator, budget: int) -> str:
    """Sentences appended while they fit ``budget`` tokens; at least one short clause."""
    sentences: list[str] = []
    used = 0
    while True:
        sentence = _sentence(rng)
        cost = _approx_tokens(sentence)
        if sentences and used + cost > budget:
            break
        if not sentences and cost > budget:
            words = sentence.rstrip(".!").split()[: max(1, budget - 1)]
            return " ".join(words) + "."
        sentences.append(sentence)
        used += cost
    return " ".join(sentences)


def build_corpus(size: int, seed: int = DEFAULT_CORPUS_SEED) -> tuple[list[str], list[str], list[str]]:
    """``size`` inputs: half single texts, half (text, pair) pairs, lengths spread over 8–256 tokens.

    Returns:
        ``(singles, pair_firsts, pair_seconds)``; ``len(singles) + len(pair_firsts) == size``.

    Raises:
        ValueError: ``size`` < 2.
    """
    if size < 2:
        raise ValueError(f"corpus size must be >= 2 (half singles, half pairs), got {size}")
    rng = np.random.default_rng(seed)
    singles, firsts, seconds = [], [], []
    for index in range(size):
        # Log-uniform lengths: many short inputs and a long tail, as in real traffic.
        target = int(np.exp(rng.uniform(np.log(MIN_TOKENS), np.log(MAX_TOKENS))))
        if index % 2 == 0:
            singles.append(_passage(rng, max(1, target - SPECIAL_SINGLE)))
        else:
            budget = max(2, target - SPECIAL_PAIR)
            share = max(1, int(budget * rng.uniform(0.3, 0.7)))
            firsts.append(_passage(rng, share))
            seconds.append(_passage(rng, max(1, budget - share)))
    return singles, firsts, seconds


#: The mixed-length corpus of the corpus-throughput section (and the serving benchmark): most texts short,
#: a long tail up to ``MIXED_MAX_WORDS`` words (past 512 tokens for some, so runners truncate at 512).
MIXED_CORPUS_SIZE = 4000
MIXED_MIN_WORDS = 3
MIXED_SHORT_WORDS = 30
MIXED_MAX_WORDS = 400
#: Share of texts under ``MIXED_SHORT_WORDS`` words.
MIXED_SHORT_SHARE = 0.7


def build_mixed_corpus(size: int = MIXED_CORPUS_SIZE, seed: int = DEFAULT_CORPUS_SEED) -> list[str]:
    """``size`` seeded texts of 3-400 words: 70 % under 30 words (uniform), the rest log-uniform up to 400.

    Raises:
        ValueError: ``size`` < 1.
    """
    if size < 1:
        raise ValueError(f"corpus size must be >= 1, got {size}")
    rng = np.random.default_rng(seed)
    texts = []
    for _ in range(size):
        if rng.random() < MIXED_SHORT_SHARE:
            words = int(rng.integers(MIXED_MIN_WORDS, MIXED_SHORT_WORDS))
        else:
            words = int(np.exp(rng.uniform(np.log(MIXED_SHORT_WORDS), np.log(MIXED_MAX_WORDS))))
        texts.append(_passage(rng, words))
    return texts
