"""A seeded, generated corpus for tokenizer parity: every character class that trips BERT tokenizers.

Texts are built from per-class generators driven by one ``random.Random(seed)``, so the corpus is the same
on every machine and every run. Regular classes must tokenize identically in the runtime (Rust
``tokenizers``) and in transformers' slow Python ``BertTokenizer``; the ``DIVERGENT_CLASSES`` are the
character classes where the two implementations genuinely differ (see ``tests/test_tokenizer_parity.py``).
"""

from __future__ import annotations

import random
import string
from collections.abc import Callable

SEED = 20240611
TEXTS_PER_CLASS = 200
PAIRS = 500
DIVERGENT_TEXTS_PER_CLASS = 25
#: The WordPiece rule: a word of more characters than this becomes a single [UNK].
MAX_WORD_CHARS = 100

_WORD_TEXT = (
    "the weather is nice today and i agree with you while the quick brown fox jumps over a lazy dog "
    "tokenization of unbelievable antidisestablishmentarianism hyperparameters paris tokyo bank river "
    "running played playing model inference onnx runtime parity"
)
WORDS = tuple(_WORD_TEXT.split())
ACCENTED = "àáâãäåæçèéêëìíîïñòóôõöøùúûüýÿÀÁÂÃÄÅÆÇÈÉÊËÌÍÎÏÑÒÓÔÕÖØÙÚÛÜÝßẞőŐűŰłŁžŽšŠčČřŘğĞşŞąĄęĘœŒ"
ACCENTED_WORDS = ("café", "déjà", "naïve", "façade", "résumé", "Ångström", "São", "Zürich", "Øresund", "Straße")
COMBINING = ("\u0301", "\u0300", "\u0308", "\u0327", "\u0303", "\u030a", "\u0323", "\u0302")
GREEK_CYRILLIC_TURKISH = ("ΟΔΟΣ", "Σοφία", "ΑΘΗΝΑΣ", "Москва", "ПРИВЕТ", "İstanbul", "ıI", "DİYARBAKIR", "ǅemal")
HIRAGANA = "".join(chr(c) for c in range(0x3041, 0x3097))
KATAKANA = "".join(chr(c) for c in range(0x30A1, 0x30FB))
CJK_PUNCT = "。、「」『』！？：；（）〜・"
EMOJI = (
    "😀",
    "😂",
    "👍",
    "👍🏽",
    "❤️",
    "🎉",
    "🚀",
    "🇫🇷",
    "🇯🇵",
    "1️⃣",
    "👨\u200d👩\u200d👧",
    "🏳️\u200d🌈",
    "🤖",
    "🥰",
    "✨",
    "☕",
)
#: C0/C1 controls other than tab, newline and carriage return; format characters; U+FFFD; private use.
CONTROL = (
    [chr(c) for c in range(0x00, 0x20) if chr(c) not in "\t\n\r"]
    + [chr(0x7F)]
    + [chr(c) for c in range(0x80, 0xA0)]
    + ["\u00ad", "\u200b", "\u200c", "\u200d", "\u200e", "\u200f", "\u2060", "\ufeff", "\u061c", "\u202a"]
    + ["\u202b", "\u202c", "\u202d", "\u202e", "\u2066", "\u2069", "\ufffd", "\ue000", "\uf8ff", "\U000f0000"]
)
ARABIC_WORDS = ("مرحبا", "بالعالم", "اللُّغَةُ", "العَرَبِيَّة", "كتـــاب", "٣٤٥", "۱۲۳", "سلام")
HEBREW_WORDS = ("שלום", "עולם", "בְּרֵאשִׁית", "ירושלים", "עִבְרִית")
RTL_MARKS = ("\u200f", "\u200e", "\u061c", "")
WHITESPACE = (
    "\t",
    "\n",
    "\r\n",
    "\r",
    "\u00a0",
    "\u3000",
    "\u2002",
    "\u2003",
    "\u2009",
    "\u200a",
    "\u202f",
    "\u205f",
    "\u1680",
    "\u2028",
    "\u2029",
    "\x0b",
    "\x0c",
    "\x85",
    "  ",
    " \t ",
)
PUNCT_SYMBOLS = "!\"#$%&'()*+,-./:;<=>?@[\\]^_`{|}~«»“”‘’—–…¿¡§¶†‡•±×÷≤≥≠∞€£¥¢°‰′″"
#: Lone surrogates (category Cs): what ``surrogateescape`` makes of bytes that are not UTF-8 (U+DC80-U+DCFF),
#: the ends of both halves' ranges, and an emoji's two halves held as two code points.
SURROGATES = ("\udce9", "\udc80", "\udcff", "\ud800", "\udbff", "\udc00", "\udfff", "\ud83d\ude00")
#: The vocabulary's special tokens, which both tokenizers match inside a text.
SPECIAL_TOKENS = ("[MASK]", "[CLS]", "[SEP]", "[UNK]", "[PAD]")
LONG_TEXTS = 48


def _word(rng: random.Random) -> str:
    return rng.choice(WORDS)


def _sentence(rng: random.Random, low: int = 1, high: int = 10) -> str:
    return " ".join(_word(rng) for _ in range(rng.randint(low, high)))


def _mix(rng: random.Random, pieces: list[str]) -> str:
    """Interleave ``pieces`` with plain words, joined by a space or glued to neighbours."""
    out = []
    for piece in pieces:
        if rng.random() < 0.5:
            out.append(_word(rng))
        out.append(piece)
    return "".join(part + rng.choice((" ", " ", "")) for part in out).strip(" ") or "x"


def _ascii(rng: random.Random) -> str:
    pieces = []
    for _ in range(rng.randint(1, 12)):
        word = _word(rng)
        style = rng.randrange(4)
        word = (word.upper(), word.capitalize(), word, word.swapcase())[style]
        pieces.append(word + rng.choice(("", "", ",", ".", "!", "?", "'s", "-")))
    return " ".join(pieces)


def _accents(rng: random.Random) -> str:
    pieces = []
    for _ in range(rng.randint(1, 8)):
        kind = rng.randrange(3)
        if kind == 0:
            pieces.append(rng.choice(ACCENTED_WORDS))
        elif kind == 1:
            pieces.append("".join(rng.choice(ACCENTED + string.ascii_letters) for _ in range(rng.randint(1, 9))))
        else:  # decomposed: base letter(s) followed by combining marks
            base = rng.choice(string.ascii_letters)
            pieces.append(_word(rng) + base + "".join(rng.choice(COMBINING) for _ in range(rng.randint(1, 3))))
    return _mix(rng, pieces)


def _cjk(rng: random.Random) -> str:
    pieces = []
    for _ in range(rng.randint(1, 6)):
        kind = rng.randrange(4)
        if kind == 0:
            pieces.append("".join(chr(rng.randint(0x4E00, 0x9FA5)) for _ in range(rng.randint(1, 8))))
        elif kind == 1:
            pieces.append("".join(rng.choice(HIRAGANA + KATAKANA) for _ in range(rng.randint(1, 6))))
        elif kind == 2:
            pieces.append("".join(chr(rng.randint(0xAC00, 0xD7A3)) for _ in range(rng.randint(1, 4))))
        else:
            pieces.append(rng.choice(CJK_PUNCT) + rng.choice(("\u3000", "", " ")))
    return _mix(rng, pieces)


def _emoji(rng: random.Random) -> str:
    return _mix(rng, ["".join(rng.choice(EMOJI) for _ in range(rng.randint(1, 3))) for _ in range(rng.randint(1, 5))])


def _control(rng: random.Random) -> str:
    pieces = []
    for _ in range(rng.randint(1, 6)):
        word = _word(rng)
        cut = rng.randint(0, len(word))
        pieces.append(word[:cut] + rng.choice(CONTROL) + word[cut:])
    return _mix(rng, pieces)


def _rtl(rng: random.Random) -> str:
    pieces = []
    for _ in range(rng.randint(1, 6)):
        word = rng.choice(ARABIC_WORDS + HEBREW_WORDS)
        pieces.append(rng.choice(RTL_MARKS) + word + rng.choice(("", "،", "؟", ".", "״")))
    return _mix(rng, pieces)


def _long_words(rng: random.Random) -> str:
    pieces = []
    for _ in range(rng.randint(1, 3)):
        n = rng.choice((MAX_WORD_CHARS - 1, MAX_WORD_CHARS, MAX_WORD_CHARS + 1, rng.randint(90, 140)))
        kind = rng.randrange(4)
        if kind == 0:
            pieces.append("".join(rng.choice(string.ascii_letters) for _ in range(n)))
        elif kind == 1:  # accents are stripped before the length rule applies
            pieces.append("".join(rng.choice("éa") for _ in range(n)))
        elif kind == 2:
            pieces.append("".join(rng.choice(string.digits) for _ in range(n)))
        else:  # CJK characters are split one by one, so the run is never one word
            pieces.append("".join(chr(rng.randint(0x4E00, 0x9FA5)) for _ in range(rng.randint(90, 110))))
    return _mix(rng, pieces)


def _whitespace(rng: random.Random) -> str:
    out = rng.choice(("", *WHITESPACE))
    for _ in range(rng.randint(1, 10)):
        out += _word(rng) + rng.choice(WHITESPACE)
    return out + rng.choice(("", *WHITESPACE))


def _digits_punct(rng: random.Random) -> str:
    pieces = []
    for _ in range(rng.randint(1, 8)):
        kind = rng.randrange(4)
        if kind == 0:
            pieces.append(f"{rng.randint(0, 10 ** rng.randint(1, 9)):,}")
        elif kind == 1:
            pieces.append(f"{rng.randint(1900, 2099)}-{rng.randint(1, 12):02d}-{rng.randint(1, 28):02d}")
        elif kind == 2:
            pieces.append("".join(rng.choice(PUNCT_SYMBOLS) for _ in range(rng.randint(1, 4))))
        else:
            pieces.append(f"{rng.choice('$€£¥')}{rng.random() * 1000:.2f}")
    return _mix(rng, pieces)


def _mixed_case(rng: random.Random) -> str:
    pieces = []
    for _ in range(rng.randint(1, 8)):
        kind = rng.randrange(3)
        if kind == 0:
            pieces.append(rng.choice(GREEK_CYRILLIC_TURKISH))
        elif kind == 1:
            pieces.append("".join(w.capitalize() for w in (_word(rng), _word(rng))))  # CamelCase
        else:
            pieces.append("".join(c.upper() if rng.random() < 0.5 else c for c in _word(rng)))
    return _mix(rng, pieces)


def _lone_surrogates(rng: random.Random) -> str:
    pieces = []
    for _ in range(rng.randint(1, 6)):
        kind = rng.randrange(3)
        word = rng.choice(SPECIAL_TOKENS) if kind == 1 else _word(rng)
        cut = rng.randint(0, len(word))
        if kind == 2:
            pieces.append("".join(rng.choice(SURROGATES) for _ in range(rng.randint(1, 4))))
        else:  # inside a word, or inside a special token (which it then breaks, as in the reference)
            pieces.append(word[:cut] + rng.choice(SURROGATES) + word[cut:])
    return _mix(rng, pieces)


def _mixed(rng: random.Random) -> str:
    makers = [m for name, m in REGULAR_CLASSES.items() if name != "mixed"]
    return " ".join(rng.choice(makers)(rng) for _ in range(rng.randint(2, 3)))


REGULAR_CLASSES: dict[str, Callable[[random.Random], str]] = {
    "ascii": _ascii,
    "accents": _accents,
    "cjk": _cjk,
    "emoji": _emoji,
    "control_zero_width": _control,
    "rtl": _rtl,
    "long_words": _long_words,
    "whitespace": _whitespace,
    "digits_punctuation": _digits_punct,
    "mixed_case": _mixed_case,
    "lone_surrogates": _lone_surrogates,
    "mixed": _mixed,
}

#: Code points the two tokenizers treat differently, by class. See test_tokenizer_parity for the reasons.
DIVERGENT_CLASSES: dict[str, tuple[str, ...]] = {
    # Unassigned in every Unicode version (general category Cn).
    "unassigned_code_points": ("\u0378", "\u0590", "\ufdd0", "\uffff", "\U0001ffff", "\U0010ffff"),
    # Assigned in Unicode 11-14 (Python 3.11's unicodedata) but not in tokenizers' Rust tables.
    "newer_unicode_assignments": ("\u2e53", "\u2e55", "\u2e5d", "\u0898", "\u08ca", "\U00013430", "\u07fd"),
    # CJK Extension F starts at U+2B820; the Rust CJK range skips U+2B820-U+2B91F.
    "cjk_extension_f_gap": tuple(chr(c) for c in (0x2B820, 0x2B821, 0x2B8A0, 0x2B91F)),
}


def texts(seed: int = SEED, per_class: int = TEXTS_PER_CLASS) -> dict[str, list[str]]:
    """Regular texts, ``per_class`` of each class, generated from ``seed``."""
    rng = random.Random(seed)
    return {name: [make(rng) for _ in range(per_class)] for name, make in REGULAR_CLASSES.items()}


def pairs(seed: int = SEED + 1, n: int = PAIRS) -> list[tuple[str, str]]:
    """Sentence pairs drawn from every regular class, some long enough to need truncation at 128 tokens."""
    rng = random.Random(seed)
    makers = list(REGULAR_CLASSES.values())
    out = []
    for _ in range(n):
        first, second = rng.choice(makers)(rng), rng.choice(makers)(rng)
        if rng.random() < 0.3:
            first += " " + _sentence(rng, 20, 90)
        if rng.random() < 0.3:
            second += " " + _sentence(rng, 20, 90)
        out.append((first, second))
    return out


def divergent_texts(seed: int = SEED + 2, per_class: int = DIVERGENT_TEXTS_PER_CLASS) -> dict[str, list[str]]:
    """Texts that each contain at least one code point of a divergent class, embedded in ordinary words."""
    rng = random.Random(seed)
    out: dict[str, list[str]] = {}
    for name, chars in DIVERGENT_CLASSES.items():
        out[name] = [
            _mix(rng, [_word(rng)[: rng.randint(0, 4)] + rng.choice(chars) for _ in range(rng.randint(1, 4))])
            for _ in range(per_class)
        ]
    return out


def long_texts(seed: int = SEED + 3, n: int = LONG_TEXTS) -> list[str]:
    """Texts of about 1,000 to 40,000 characters, for truncation, in six kinds that stress a tokenizer
    reading only a prefix: the regular classes run together; CJK without spaces; words of 80-130 characters
    (over 100 they become one [UNK]); special tokens glued to words; a long run that gives no token (spaces,
    controls, zero-width or lone surrogates, combining marks) before the words; and text that normalizes to
    nothing at all."""
    rng = random.Random(seed)
    makers = list(REGULAR_CLASSES.values())
    nothing = [c for c in CONTROL if c not in "\ue000\uf8ff\U000f0000"] + [" ", "\u3000", *SURROGATES]
    out = []
    for i in range(n):
        kind = i % 6
        if kind == 0:
            text = " ".join(rng.choice(makers)(rng) for _ in range(rng.randint(50, 400)))
        elif kind == 1:
            text = "".join(chr(rng.randint(0x4E00, 0x9FA5)) for _ in range(rng.randint(600, 3000)))
        elif kind == 2:
            letters = string.ascii_letters + "éàü"
            text = " ".join(
                "".join(rng.choice(letters) for _ in range(rng.randint(80, 130))) for _ in range(rng.randint(20, 100))
            )
        elif kind == 3:
            glue = (*SPECIAL_TOKENS, "", " ", "[", "]")
            text = "".join(_word(rng) + rng.choice(glue) for _ in range(rng.randint(300, 2000)))
        elif kind == 4:
            filler = rng.choice((" ", "\x07", "\u200b", "\udce9", "\n", "e\u0301\u0301"))
            text = filler * rng.randint(500, 10000) + " " + _sentence(rng, 100, 800)
        else:
            text = "".join(rng.choice(nothing) for _ in range(rng.randint(1000, 20000)))
        out.append(text)
    return out
