"""The runtime tokenizer against transformers' Python ``BertTokenizer`` on a generated corpus.

``bertonnx.tokenizer.TextTokenizer`` (Rust ``tokenizers``, from the export's ``tokenizer.json``) must give
the ids, segment ids and attention masks of BERT's reference tokenizer, the slow Python ``BertTokenizer``,
on 2,200 seeded texts in 11 character classes (``tests/corpus.py``), 500 pairs, and 500 pairs truncated at
five lengths.

Known differences, kept in the corpus as strict xfails (a fix upstream turns them into failures to
remove). They come from the Unicode tables, not from the algorithm, so we do not patch the runtime (the
Python side even changes with the interpreter's ``unicodedata`` version, 14.0 on Python 3.11); on them the
runtime equals transformers' fast ``BertTokenizerFast``, which PyTorch users get from ``AutoTokenizer``:

- ``unassigned_code_points`` (general category Cn, e.g. U+0378, U+FFFF): Python's ``_is_control`` counts
  every ``C*`` category and deletes them; the Rust normalizer keeps them, so they become ``[UNK]`` or glue
  to the neighbouring word.
- ``newer_unicode_assignments`` (U+2E53-U+2E5D punctuation, U+0898-U+08DF and U+07FD marks, U+13430
  format controls): assigned in Unicode 11-14, unknown to the Rust tables, so Python splits, strips or
  deletes them and Rust keeps them inside words.
- ``cjk_extension_f_gap`` (U+2B820-U+2B91F): Python's CJK ranges cover them and split them out; the Rust
  ranges skip them.

Truncated pairs are the one place the reference is not BERT's: when both sides must be cut, BERT's
``_truncate_seq_pair`` (and the slow tokenizer) gives the odd token of an odd budget to the first sequence,
``tokenizers``' ``longest_first`` to the longer one (the second on a tie). The runtime follows
``tokenizers``, the rule transformers' pipelines apply (issue 34), so truncated pairs are checked against
``BertTokenizerFast`` and, for long pairs, against the reference's ids cut by :func:`_longest_first`.

Truncation tokenizes only a prefix of each text (``bertonnx/tokenizer.py``), so long texts and pairs of
six kinds that stress a prefix (``corpus.long_texts``) are checked here too, against the reference and
against the runtime's own tokenization of the whole text, at many ``max_length`` values. Lone surrogates,
which ``tokenizers`` refuses, are a regular class: the runtime tokenizes them as the reference does.
"""

from __future__ import annotations

import itertools
from pathlib import Path

import pytest
from transformers import BertTokenizer, BertTokenizerFast
from transformers.utils import logging as hf_logging

from bertonnx.manifest import TOKENIZER_FILE
from bertonnx.tokenizer import PREFIX_CHARS_PER_TOKEN, TextTokenizer, clean_text, pair_truncation_lengths

from . import corpus
from .conftest import VOCAB

MAX_POSITIONS = 512
TRUNCATION_LENGTHS = (8, 16, 33, 64, 128)
MIN_TEXTS = 2000
MIN_PAIRS = 500

TEXTS = corpus.texts()
PAIRS = corpus.pairs()
DIVERGENT = corpus.divergent_texts()
LONG = corpus.long_texts()
#: Long pairs: each long text with the next one, and with a short text on either side.
LONG_PAIRS = [
    *zip(LONG, LONG[1:] + LONG[:1], strict=True),
    *((text, short) for text, short in zip(LONG[::2], TEXTS["mixed"], strict=False)),
    *((short, text) for text, short in zip(LONG[1::2], TEXTS["cjk"], strict=False)),
]


@pytest.fixture(scope="module")
def slow() -> BertTokenizer:
    hf_logging.set_verbosity_error()  # the slow tokenizer warns once per truncated pair
    return BertTokenizer(vocab_file=str(VOCAB), do_lower_case=True)


@pytest.fixture(scope="module")
def fast() -> BertTokenizerFast:
    return BertTokenizerFast(vocab_file=str(VOCAB), do_lower_case=True)


@pytest.fixture(scope="module")
def runtime(tiny_export: Path) -> TextTokenizer:
    return TextTokenizer(tiny_export / TOKENIZER_FILE, MAX_POSITIONS)


Encoded = tuple[list[int], list[int], list[int]]


def _longest_first(first: int, second: int, budget: int) -> tuple[int, int]:
    """``tokenizers``' ``TruncationStrategy::LongestFirst`` (tokenizers/src/utils/truncation.rs), line by line."""
    if first + second <= budget:
        return first, second
    n1, n2, swap = (second, first, True) if first > second else (first, second, False)
    n2 = n1 if n1 > budget else max(n1, budget - n1)
    if n1 + n2 > budget:
        n1 = budget // 2
        n2 = n1 + budget % 2
    return (n2, n1) if swap else (n1, n2)


def _slow(slow: BertTokenizer, text: str, pair: str | None = None, max_length: int | None = None) -> Encoded:
    if pair is not None and max_length:  # the reference's ids of each side, cut as the fast tokenizer cuts
        a, b = slow.encode(text, add_special_tokens=False), slow.encode(pair, add_special_tokens=False)
        keep_a, keep_b = _longest_first(len(a), len(b), max_length - 3)
        ids = [slow.cls_token_id, *a[:keep_a], slow.sep_token_id, *b[:keep_b], slow.sep_token_id]
        return ids, [0] * (keep_a + 2) + [1] * (keep_b + 1), [1] * len(ids)
    kwargs = {"truncation": "longest_first", "max_length": max_length} if max_length else {}
    enc = slow(text, pair, return_token_type_ids=True, return_attention_mask=True, **kwargs)
    return list(enc["input_ids"]), list(enc["token_type_ids"]), list(enc["attention_mask"])


def _runtime(
    runtime: TextTokenizer, texts: list[str], pairs: list[str] | None = None, max_length: int | None = None
) -> list[Encoded]:
    encodings = runtime.encode(texts, pairs, truncation=max_length is not None, max_length=max_length or MAX_POSITIONS)
    return [(list(e.ids), list(e.type_ids), list(e.attention_mask)) for e in encodings]


def _mismatches(want: list[Encoded], got: list[Encoded], inputs: list[object]) -> list[str]:
    return [
        f"{item!r}: runtime {g[0]} != BertTokenizer {w[0]}"
        for item, w, g in zip(inputs, want, got, strict=True)
        if w != g
    ]


def test_corpus_is_large_and_deterministic() -> None:
    assert sum(len(texts) for texts in TEXTS.values()) >= MIN_TEXTS
    assert len(PAIRS) >= MIN_PAIRS
    assert corpus.texts() == TEXTS
    assert corpus.pairs() == PAIRS
    long_words = "\n".join(TEXTS["long_words"])
    assert any(len(w) == corpus.MAX_WORD_CHARS for w in long_words.split())
    assert any(len(w) == corpus.MAX_WORD_CHARS + 1 for w in long_words.split())


@pytest.mark.parametrize("char_class", list(TEXTS))
def test_texts_match_bert_tokenizer(slow: BertTokenizer, runtime: TextTokenizer, char_class: str) -> None:
    texts = TEXTS[char_class]
    want = [_slow(slow, text) for text in texts]
    got = _runtime(runtime, texts)
    problems = _mismatches(want, got, list(texts))
    assert not problems, f"{len(problems)} of {len(texts)} {char_class} texts differ:\n" + "\n".join(problems[:5])


def test_long_word_rule(slow: BertTokenizer, runtime: TextTokenizer) -> None:
    unk = slow.unk_token_id
    for n, expect_unk in ((corpus.MAX_WORD_CHARS, False), (corpus.MAX_WORD_CHARS + 1, True)):
        word = "ab" * (n // 2) + "a" * (n % 2)
        (got,) = _runtime(runtime, [f"see {word} here"])
        assert got == _slow(slow, f"see {word} here")
        assert (got[0][2] == unk) is expect_unk, n


def test_pairs_match_bert_tokenizer(slow: BertTokenizer, runtime: TextTokenizer) -> None:
    want = [_slow(slow, a, b) for a, b in PAIRS]
    got = _runtime(runtime, [a for a, _ in PAIRS], [b for _, b in PAIRS])
    problems = _mismatches(want, got, list(PAIRS))
    assert not problems, f"{len(problems)} of {len(PAIRS)} pairs differ:\n" + "\n".join(problems[:5])
    assert all(1 in types for _, types, _ in got)


@pytest.mark.parametrize("max_length", TRUNCATION_LENGTHS)
def test_truncated_pairs_match_longest_first(fast: BertTokenizerFast, runtime: TextTokenizer, max_length: int) -> None:
    """Truncated pairs equal the fast tokenizer's, which the pipelines apply (not BERT's rule)."""
    # (lone surrogates, which the fast tokenizer refuses, stand in as NUL as the runtime has them)
    found = [fast(clean_text(a), clean_text(b), truncation="longest_first", max_length=max_length) for a, b in PAIRS]
    want = [(list(e["input_ids"]), list(e["token_type_ids"]), list(e["attention_mask"])) for e in found]
    got = _runtime(runtime, [a for a, _ in PAIRS], [b for _, b in PAIRS], max_length)
    problems = _mismatches(want, got, list(PAIRS))
    assert not problems, f"{len(problems)} pairs differ at max_length={max_length}:\n" + "\n".join(problems[:5])
    assert max(len(ids) for ids, _, _ in got) == max_length


@pytest.mark.parametrize("max_length", TRUNCATION_LENGTHS)
def test_truncated_singles_match(slow: BertTokenizer, runtime: TextTokenizer, max_length: int) -> None:
    texts = TEXTS["mixed"]
    want = [_slow(slow, text, None, max_length) for text in texts]
    assert _mismatches(want, _runtime(runtime, texts, None, max_length), list(texts)) == []


@pytest.fixture(scope="module")
def slow_ids(slow: BertTokenizer) -> dict[str, list[int]]:
    """The reference's ids (no special tokens, no truncation) of the long texts and 10 texts per class."""
    texts = LONG + [text for texts in TEXTS.values() for text in texts[:10]]
    return {text: slow.encode(text, add_special_tokens=False) for text in texts}


@pytest.mark.parametrize("max_length", [8, 128])
def test_long_inputs_truncated_match_bert_tokenizer(
    slow: BertTokenizer, runtime: TextTokenizer, max_length: int
) -> None:
    """The reference's own truncation of long texts and pairs (the runtime tokenizes only a prefix of each)."""
    want = [_slow(slow, text, None, max_length) for text in LONG]
    problems = _mismatches(want, _runtime(runtime, LONG, None, max_length), [text[:80] for text in LONG])
    want = [_slow(slow, a, b, max_length) for a, b in LONG_PAIRS]
    got = _runtime(runtime, [a for a, _ in LONG_PAIRS], [b for _, b in LONG_PAIRS], max_length)
    problems += _mismatches(want, got, [(a[:40], b[:40]) for a, b in LONG_PAIRS])
    assert not problems, f"{len(problems)} long inputs differ at max_length={max_length}:\n" + "\n".join(problems[:3])


@pytest.mark.parametrize("max_length", [2, 3, 4, 5, 7, 13, 64, 129, 257, 512])
def test_truncated_prefixes_equal_the_cut_whole_text(
    slow_ids: dict[str, list[int]], runtime: TextTokenizer, max_length: int
) -> None:
    """A truncated text or pair has exactly the reference's ids of the whole text cut by ``longest_first``, at
    lengths where the prefix ends in every kind of place (mid-word, mid-[MASK], in a run of no tokens)."""
    texts = list(slow_ids)
    cls, sep = runtime.token_to_id("[CLS]"), runtime.token_to_id("[SEP]")
    got = runtime.encode(texts, None, truncation=True, max_length=max_length)
    problems = [
        text[:80] for text, e in zip(texts, got, strict=True) if e.ids != [cls, *slow_ids[text][: max_length - 2], sep]
    ]
    assert sum(len(text) > PREFIX_CHARS_PER_TOKEN * max_length for text in texts) >= 20  # prefixes were cut
    if max_length > 3:
        pairs = list(zip(texts, texts[7:] + texts[:7], strict=True))
        got = runtime.encode([a for a, _ in pairs], [b for _, b in pairs], truncation=True, max_length=max_length)
        for (a, b), encoding in zip(pairs, got, strict=True):
            keep_a, keep_b = _longest_first(len(slow_ids[a]), len(slow_ids[b]), max_length - 3)
            want = [cls, *slow_ids[a][:keep_a], sep, *slow_ids[b][:keep_b], sep]
            if encoding.ids != want or encoding.type_ids != [0] * (keep_a + 2) + [1] * (keep_b + 1):
                problems.append(f"pair {a[:40]!r} / {b[:40]!r}")
    assert not problems, f"{len(problems)} differ at max_length={max_length}:\n" + "\n".join(problems[:3])


def test_pair_lengths_capped_past_the_budget_are_the_same() -> None:
    """Why a side of a pair is tokenized only to ``budget + 1`` tokens: capping changes no kept length, except
    which side keeps the odd token when both reach the cap (the tokenizer then compares the two lengths)."""
    for budget in range(0, 40):
        for first, second in itertools.product(range(3 * budget + 3), repeat=2):
            cap = budget + 1
            capped = (min(first, cap) + (first > second >= cap), min(second, cap))
            assert pair_truncation_lengths(*capped, budget) == pair_truncation_lengths(first, second, budget)


def test_pair_truncation_lengths_follow_longest_first(fast: BertTokenizerFast) -> None:
    """The rule against ``tokenizers``' own (ported line by line, and the port against the fast tokenizer)."""
    for first in range(40):
        for second in range(40):
            for budget in range(0, 70, 3):
                assert pair_truncation_lengths(first, second, budget) == _longest_first(first, second, budget)
    for first, second, max_length in itertools.product(range(0, 9), range(0, 9), range(4, 12)):
        found = fast(
            " ".join(["a"] * first) or "b",
            " ".join(["c"] * second) or "d",
            max_length=max_length,
            truncation="longest_first",
            add_special_tokens=True,
        )
        a, b = max(first, 1), max(second, 1)
        kept = _longest_first(a, b, max_length - 3)
        assert found["token_type_ids"] == [0] * (kept[0] + 2) + [1] * (kept[1] + 1), (a, b, max_length)


def test_empty_second_text_is_a_single_text(fast: BertTokenizerFast, runtime: TextTokenizer) -> None:
    """An exactly empty pair is dropped, as the fast tokenizer drops ``text_pair=""`` (issue 34, class 1):
    ``[CLS] a [SEP]``, whatever the truncation; a blank one is still a pair."""
    texts = ["hello world", "hello world " * 40, "a"]
    for max_length in (None, 8, 64):
        got = runtime.encode(texts, ["", "", " "], truncation=max_length is not None, max_length=max_length)
        kwargs = {"truncation": True, "max_length": max_length} if max_length else {}
        for text, pair, encoding in zip(texts, ["", "", " "], got, strict=True):
            want = fast(text, pair, **kwargs)
            assert (encoding.ids, encoding.type_ids) == (want["input_ids"], want["token_type_ids"]), (text, pair)
    assert len(runtime.encode(["a"], [""], truncation=False, max_length=None)[0]) == 3
    assert runtime.encode(["a"], [" "], truncation=False, max_length=None)[0].type_ids == [0, 0, 0, 1]


@pytest.mark.parametrize(
    "char_class",
    [
        pytest.param(name, marks=pytest.mark.xfail(strict=True, reason=f"{name}: see module docstring"))
        for name in DIVERGENT
    ],
)
def test_divergent_classes_differ_from_bert_tokenizer(
    slow: BertTokenizer, runtime: TextTokenizer, char_class: str
) -> None:
    texts = DIVERGENT[char_class]
    want = [_slow(slow, text) for text in texts]
    assert _mismatches(want, _runtime(runtime, texts), list(texts)) == []


@pytest.mark.parametrize("char_class", list(DIVERGENT))
def test_divergent_classes_match_transformers_fast_tokenizer(runtime: TextTokenizer, char_class: str) -> None:
    fast = BertTokenizerFast(vocab_file=str(VOCAB), do_lower_case=True)
    texts = DIVERGENT[char_class]
    want = [(list(e["input_ids"]), list(e["token_type_ids"]), list(e["attention_mask"])) for e in map(fast, texts)]
    assert _mismatches(want, _runtime(runtime, texts), list(texts)) == []
