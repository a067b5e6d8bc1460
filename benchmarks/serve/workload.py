"""The serving benchmark's requests: seeded, mixed lengths, single texts through ``/embed`` and pairs through
``/predict``, 1 to 32 inputs per request.

Texts come from :func:`benchmarks.corpus.build_mixed_corpus` (the offline corpus section's corpus: 70 % under
30 words, a log-uniform tail to 400 words). A pair joins two of its texts, so two long ones pass 512 tokens and
are cut: every request sends ``"truncate": true`` (TEI's ``auto_truncate`` default). Inputs per request: half
the requests carry one input (a query), the other half 2-32, log-uniform (a page of documents; 32 is TEI's
default ``--max-client-batch-size``). The soak sends one input per request, so its 20,000 requests fit the
time budget while every engine run still mixes lengths, routes and requests.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from ..corpus import _passage, build_mixed_corpus

EMBED_ROUTE = "/embed"
PREDICT_ROUTE = "/predict"
#: Share of requests that are ``/predict`` pairs (the rest are ``/embed`` texts).
PAIR_SHARE = 0.3
#: Share of requests that carry a single input.
SINGLE_INPUT_SHARE = 0.5
MAX_INPUTS = 32
#: Positions of bert-base; inputs are cut to this many tokens (special tokens included).
MAX_LENGTH = 512
#: The single-text workload (issue 22): texts of ``SINGLE_MIN_WORDS``-``SINGLE_MAX_WORDS`` words (uniform), one per
#: ``/embed`` request, mean pooling, truncation on; the server at concurrency 1 and 32 against offline ``embed``.
SINGLE_TEXTS = 600
SINGLE_MIN_WORDS = 4
SINGLE_MAX_WORDS = 160
SINGLE_POOLING = "mean"
#: The recovery probe: one short text, the same every time, so its latency is comparable over time.
PROBE_TEXT = "The committee discussed the final plan in the morning."


@dataclass(frozen=True)
class ServeRequest:
    """One HTTP request of the workload.

    Attributes:
        route: ``/embed`` (single texts) or ``/predict`` (pairs).
        inputs: texts, or ``(text, pair)`` tuples.
        tokens: tokens the model runs for the whole request after truncation, special tokens included.
    """

    route: str
    inputs: tuple[Any, ...]
    tokens: int
    pooling: str | None = None

    def body(self) -> dict[str, Any]:
        """The JSON body (TEI's shape): a list of texts or of ``[text, pair]`` lists, truncation on (and
        ``pooling`` when set)."""
        items = [list(item) if isinstance(item, tuple) else item for item in self.inputs]
        body: dict[str, Any] = {"inputs": items, "truncate": True}
        if self.pooling is not None:
            body["pooling"] = self.pooling
        return body

    def to_json(self) -> dict[str, Any]:
        return {"route": self.route, "inputs": len(self.inputs), "tokens": self.tokens, "body": self.body()}


def input_counts(count: int, rng: np.random.Generator) -> list[int]:
    """Inputs of each of ``count`` requests: 1 for ``SINGLE_INPUT_SHARE`` of them, else log-uniform 2-32."""
    counts = []
    for _ in range(count):
        if rng.random() < SINGLE_INPUT_SHARE:
            counts.append(1)
        else:
            counts.append(min(MAX_INPUTS, int(np.exp(rng.uniform(np.log(2), np.log(MAX_INPUTS + 1))))))
    return counts


def _tokens(tokenizer: Any, inputs: Sequence[Any]) -> int:
    texts = [item[0] if isinstance(item, tuple) else item for item in inputs]
    pairs = [item[1] for item in inputs] if isinstance(inputs[0], tuple) else None
    encodings = tokenizer.encode(texts, pairs, truncation=True, max_length=MAX_LENGTH)
    return sum(len(e.ids) for e in encodings)


def _request(texts: list[str], rng: np.random.Generator, n_inputs: int, tokenizer: Any) -> ServeRequest:
    picks = rng.integers(0, len(texts), size=2 * n_inputs)
    if rng.random() < PAIR_SHARE:
        inputs: tuple[Any, ...] = tuple((texts[a], texts[b]) for a, b in zip(picks[::2], picks[1::2], strict=True))
        route = PREDICT_ROUTE
    else:
        inputs = tuple(texts[i] for i in picks[:n_inputs])
        route = EMBED_ROUTE
    return ServeRequest(route, inputs, _tokens(tokenizer, inputs))


def build_requests(
    tokenizer: Any, count: int, *, corpus_size: int, seed: int, one_input: bool = False
) -> list[ServeRequest]:
    """``count`` seeded requests over a mixed corpus of ``corpus_size`` texts.

    Args:
        tokenizer: a :class:`bertonnx.tokenizer.TextTokenizer` (to count tokens after truncation).
        count: requests.
        corpus_size: texts in the corpus the inputs are drawn from.
        seed: seeds the corpus and the draws.
        one_input: every request carries one input (the soak); else 1-32 (``input_counts``).
    """
    texts = build_mixed_corpus(corpus_size, seed)
    rng = np.random.default_rng([seed, 1 if one_input else 0])
    counts = [1] * count if one_input else input_counts(count, rng)
    return [_request(texts, rng, n, tokenizer) for n in counts]


def single_texts(count: int = SINGLE_TEXTS, seed: int = 0) -> list[str]:
    """``count`` seeded texts of ``SINGLE_MIN_WORDS``-``SINGLE_MAX_WORDS`` words (uniform), cut from the
    corpus's sentences (every word one WordPiece token)."""
    rng = np.random.default_rng([seed, 22])
    texts = []
    for _ in range(count):
        words = int(rng.integers(SINGLE_MIN_WORDS, SINGLE_MAX_WORDS + 1))
        text = " ".join(_passage(rng, 2 * words + 8).split()[:words])
        texts.append(text)
    return texts


def build_single_requests(tokenizer: Any, count: int = SINGLE_TEXTS, *, seed: int) -> list[ServeRequest]:
    """The single-text workload: one ``/embed`` request per text of :func:`single_texts`, ``pooling: mean``."""
    return [
        ServeRequest(EMBED_ROUTE, (text,), _tokens(tokenizer, [text]), SINGLE_POOLING)
        for text in single_texts(count, seed)
    ]


def probe_request(tokenizer: Any) -> ServeRequest:
    return ServeRequest(EMBED_ROUTE, (PROBE_TEXT,), _tokens(tokenizer, [PROBE_TEXT]))


def write_requests(path: Path, requests: Sequence[ServeRequest]) -> Path:
    """One JSON object per line: route, inputs, tokens and body (what the generator and offline runner read)."""
    path.write_text("".join(json.dumps(r.to_json()) + "\n" for r in requests), encoding="utf-8")
    return path


def read_requests(path: Path) -> list[dict[str, Any]]:
    return [json.loads(line) for line in path.read_text(encoding="utf-8").splitlines() if line]
