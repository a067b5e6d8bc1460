"""Faults of issue 13, each fixed for its whole kind: its example as a regression test plus inputs of our own.

1. Truncation costs memory in proportion to what is kept, never quadratic in the input (measured as peak RSS
   in a fresh process, with the address space capped so a regression fails instead of exhausting the machine).
2. Every ``str`` is tokenized as the reference does, lone surrogates included (through the CLI too).
3. Unordered collections (sets, mappings, dict views) are refused with a TypeError saying to pass a list.
6. Padding never changes results for fp32, optimized and int8 (per-row scales); bf16 within cosine 0.999.
And the layout: ``onnx`` is read only where a graph is inspected, never on ``BertOnnx``'s load path.
"""

from __future__ import annotations

import json
import subprocess
import sys
from collections import Counter, OrderedDict
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from transformers import BertTokenizer

from bertonnx import BertOnnx
from bertonnx.cli import main
from bertonnx.manifest import VARIANT_FILES

from .conftest import ROOT, VOCAB

# -- 1. memory linear in the input ------------------------------------------------------------------------

#: Peak RSS growth allowed for one truncated call of the probe. The issue's pair of two 20,000-word texts
#: grew it by 2,146 MB before the fix (quadratic: 537 MB at 10,000 words, 130 MB at 5,000).
MAX_GROWTH_MB = 64
#: Address space the probe may add after loading (a quadratic regression then fails, it cannot swap).
PROBE_ADDRESS_SPACE_MB = 2048

MEMORY_PROBE = """
import json, resource, sys
from bertonnx import BertOnnx

model = BertOnnx(sys.argv[1], threads=1)
model.nsp("word " * 300, "other " * 300, truncation=True)  # the session's buffers for 512 tokens
size_kb = next(int(line.split()[1]) for line in open("/proc/self/status") if line.startswith("VmSize:"))
limit = size_kb * 1024 + int(sys.argv[3]) * 2**20
resource.setrlimit(resource.RLIMIT_AS, (limit, limit))
a, b = eval(sys.argv[2])
before = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
if b is None:
    (value,) = model.tokenize(a, truncation=True).ids[-2:-1]
else:
    value = model.nsp(a, b, truncation=True)
growth_mb = (resource.getrusage(resource.RUSAGE_SELF).ru_maxrss - before) / 1024
print(json.dumps({"growth_mb": growth_mb, "value": value}))
"""


def _probe(model_dir: Path, inputs: str) -> dict[str, Any]:
    result = subprocess.run(
        [sys.executable, "-c", MEMORY_PROBE, str(model_dir), inputs, str(PROBE_ADDRESS_SPACE_MB)],
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert result.returncode == 0, f"the probe failed (exit {result.returncode}):\n{result.stderr[-2000:]}"
    found: dict[str, Any] = json.loads(result.stdout.splitlines()[-1])
    return found


@pytest.fixture(scope="module")
def model(tiny_export: Path) -> BertOnnx:
    return BertOnnx(tiny_export, threads=1)


def test_truncated_pair_memory_is_not_quadratic(tiny_export: Path, model: BertOnnx) -> None:
    """The issue's example: ``longest_first`` keeps 254 tokens of the first text and 255 of the second (a tie)."""
    found = _probe(tiny_export, '(" ".join(["word"] * 20000), " ".join(["other"] * 20000))')
    assert found["growth_mb"] < MAX_GROWTH_MB
    assert found["value"] == pytest.approx(model.nsp(" ".join(["word"] * 254), " ".join(["other"] * 255)), abs=1e-6)


@pytest.mark.parametrize(
    ("inputs", "want_a", "want_b"),
    [
        pytest.param('(" ".join(["word"] * 80000), None)', None, None, id="one-text-80000-words"),
        pytest.param(
            '(" ".join(["word"] * 80000), " ".join(["other"] * 80000))', "word " * 254, "other " * 255, id="pair-4x"
        ),
        # Worst case for a prefix: a million spaces give no token, so the prefix grows to the whole text.
        pytest.param(
            '(" " * 1_000_000 + " ".join(["word"] * 20000), "中" * 200_000)', "word " * 254, "中" * 255, id="blank-cjk"
        ),
        # two texts with no token are still a pair ([CLS] [SEP] [SEP]); an exactly empty second text is not
        pytest.param('("\\x07" * 2_000_000, "\\udce9" * 2_000_000)', "\x07", "\x07", id="pair-of-nothing"),
    ],
)
def test_truncation_memory_stays_bounded(
    tiny_export: Path, model: BertOnnx, inputs: str, want_a: str | None, want_b: str | None
) -> None:
    found = _probe(tiny_export, inputs)
    assert found["growth_mb"] < MAX_GROWTH_MB
    if want_a is None:
        assert found["value"] == model.tokenizer.token_to_id("word")  # the last kept token
    else:
        assert found["value"] == pytest.approx(model.nsp(want_a, want_b), abs=1e-6)


def test_a_pipeline_other_than_berts_is_tokenized_whole(tiny_export: Path, tmp_path: Path) -> None:
    """Prefixes are exact only for BERT's normalizer, pre-tokenizer and WordPiece; any other is cut whole."""
    from tokenizers import Tokenizer

    from bertonnx.tokenizer import TextTokenizer

    data = json.loads((tiny_export / "tokenizer.json").read_text())
    data["pre_tokenizer"] = {"type": "Whitespace"}
    path = tmp_path / "tokenizer.json"
    path.write_text(json.dumps(data))
    tokenizer = TextTokenizer(path, 512)
    assert not tokenizer.prefix_safe
    assert TextTokenizer(tiny_export / "tokenizer.json", 512).prefix_safe
    text = "word, " * 3000
    whole = Tokenizer.from_file(str(path)).encode(text, add_special_tokens=False).ids
    (got,) = tokenizer.encode([text], None, truncation=True, max_length=16)
    assert got.ids == [101, *whole[:14], 102]


# -- 2. every str tokenized as the reference does --------------------------------------------------------


@pytest.fixture(scope="module")
def reference() -> BertTokenizer:
    return BertTokenizer(vocab_file=str(VOCAB), do_lower_case=True)


def test_lone_surrogate_is_tokenized_as_the_reference_does(model: BertOnnx, reference: BertTokenizer) -> None:
    """The issue's example: before, a foreign TypeError naming no input, and the two valid texts lost."""
    texts = ["a normal text", "caf\udce9 au lait", "another"]
    assert model.tokenize(texts[1]).ids == reference(texts[1])["input_ids"]
    assert model.tokenize(texts[1]).tokens == ["[CLS]", "caf", "au", "lai", "##t", "[SEP]"]  # U+DCE9 deleted
    np.testing.assert_array_equal(model.embed(texts), model.embed(["a normal text", "caf au lait", "another"]))


@pytest.mark.parametrize(
    ("text", "pair"),
    [
        ("\ud83d\ude00 smile", None),  # an emoji's halves held as two code points
        ("inter\udc80rupted word", "second \udfff"),
        ("[MA\udce9SK] breaks the special token", None),
        ("\ud800\udbff\udc00", "only surrogates"),
        ("\udce9" * 3000 + " then words", "and " * 300),  # truncated
    ],
)
def test_surrogates_anywhere_match_the_reference(
    model: BertOnnx, reference: BertTokenizer, text: str, pair: str | None
) -> None:
    got = model.tokenize(text, pair, truncation=True)
    want = reference(text, pair, truncation="longest_first", max_length=512, return_token_type_ids=True)
    assert (got.ids, got.type_ids) == (want["input_ids"], want["token_type_ids"])
    assert model([text], None if pair is None else [pair], truncation=True).pooler_output.shape == (1, 32)


def test_cli_argument_that_is_not_utf8(tiny_export: Path) -> None:
    """Bytes that are not UTF-8 reach Python as surrogates (``surrogateescape``)."""
    result = subprocess.run(
        [sys.executable, "-m", "bertonnx.cli", "tokenize", str(tiny_export), b"caf\xe9 au lait", "--json"],
        capture_output=True,
        cwd=ROOT,
        timeout=120,
    )
    assert result.returncode == 0, result.stderr.decode(errors="replace")
    assert json.loads(result.stdout)["results"][0]["tokens"] == ["[CLS]", "caf", "au", "lai", "##t", "[SEP]"]


# -- 3. unordered collections refused ----------------------------------------------------------------------

MAPPING = r"is a \w+: a mapping or a view of one is not taken as texts .*; pass a list of str"
UNORDERED = r"is a \w+, which has no order for the results to follow; pass a list of str"


@pytest.mark.parametrize(
    ("call", "message"),
    [
        pytest.param(lambda m: m({"a": 1}), "texts " + MAPPING, id="issue-example-dict"),
        pytest.param(lambda m: m(OrderedDict(a="x")), "texts " + MAPPING, id="ordered-dict"),
        pytest.param(lambda m: m(Counter(["a"])), "texts " + MAPPING, id="counter"),
        pytest.param(lambda m: m({"a": "x"}.keys()), "texts " + MAPPING, id="keys"),
        pytest.param(lambda m: m({"a": "x"}.values()), "texts " + MAPPING, id="values"),
        pytest.param(lambda m: m({"a": "x"}.items()), "texts " + MAPPING, id="items"),
        pytest.param(lambda m: m({"a", "b"}), "texts " + UNORDERED, id="set"),
        pytest.param(lambda m: m(frozenset(["a"])), "texts " + UNORDERED, id="frozenset"),
        pytest.param(lambda m: m(["a"], {"b"}), "text_pairs " + UNORDERED, id="pairs-set"),
        pytest.param(lambda m: m.embed({"a": 1}), "texts " + MAPPING, id="embed"),
        pytest.param(lambda m: m.encode({"a"}), "texts " + UNORDERED, id="encode"),
        pytest.param(lambda m: m.nsp({"a": 1}, {"b": 2}), "text_a " + MAPPING, id="nsp"),
        pytest.param(lambda m: m.nsp(["a"], {"b"}), "text_b " + UNORDERED, id="nsp-second"),
    ],
)
def test_unordered_inputs_are_refused(model: BertOnnx, call: Any, message: str) -> None:
    with pytest.raises(TypeError, match=message):
        call(model)


def test_ordered_iterables_are_taken(model: BertOnnx) -> None:
    texts = ["the weather is nice", "a", "i agree with you"]
    want = model.embed(texts)
    for value in (tuple(texts), (t for t in texts), np.array(texts), iter(texts)):
        np.testing.assert_array_equal(model.embed(value), want)
    np.testing.assert_array_equal(model.nsp(np.array(texts), tuple(texts)), model.nsp(texts, texts))


# -- 6. batch invariance per variant ---------------------------------------------------------------------

BATCH_TEXTS = [
    "the weather is nice",
    "i agree with you",
    "a dog runs through the park chasing a red ball while children laugh",
    "onnx runtime makes bert fast on cpu",
    "Paris is the capital of France.",
    "x",
    " ".join(["a long text about many things"] * 20),
    "café déjà vu naïve",
    "東京は日本の首都です",
    "1234 5678 and some numbers",
]


def _cosine(a: np.ndarray, b: np.ndarray) -> float:
    a64, b64 = a.astype(np.float64).ravel(), b.astype(np.float64).ravel()
    return float(a64 @ b64 / (np.linalg.norm(a64) * np.linalg.norm(b64)))


def batch_variance(model: BertOnnx, texts: list[str] = BATCH_TEXTS) -> dict[str, tuple[float, float]]:
    """Worst ``(max abs diff, min cosine)`` per output between each text run alone and run at each position
    of a batch with 3 others (so padded to a longer input); hidden states by token."""
    worst: dict[str, tuple[float, float]] = {}
    for i, text in enumerate(texts):
        alone, alone_mean = model([text]), model.embed([text], "mean")[0]
        for position in range(4):
            others = [texts[(i + k) % len(texts)] for k in (1, 3, 6)]
            batch = [*others[:position], text, *others[position:]]
            out, mean = model(batch), model.embed(batch, "mean")[position]
            pairs = {
                "last_hidden_state": (alone.token_states(0), out.token_states(position)),
                "pooler_output": (alone.pooler_output[0], out.pooler_output[position]),
                "mean_pooled": (alone_mean, mean),
                "nsp_probability": (model.nsp(text, text), model.nsp(batch, batch)[position]),
            }
            for name, (a, b) in pairs.items():
                a, b = np.atleast_2d(a), np.atleast_2d(b)
                cosine = min(_cosine(x, y) for x, y in zip(a, b, strict=True)) if name != "nsp_probability" else 1.0
                old = worst.get(name, (0.0, 1.0))
                worst[name] = (max(old[0], float(np.abs(a - b).max())), min(old[1], cosine))
    return worst


@pytest.mark.parametrize("variant", list(VARIANT_FILES))
def test_padding_changes_no_result(tiny_export: Path, variant: str) -> None:
    model = BertOnnx(tiny_export, variant, threads=1)
    worst = batch_variance(model)
    if model.precision == "bf16":
        assert all(cosine >= 0.999 for _, cosine in worst.values()), worst
    else:  # int8 too: its activation scales are per row (token), never over the batch
        assert all(diff <= 1e-5 for diff, _ in worst.values()), worst


@pytest.mark.slow
def test_int8_is_batch_invariant_on_real_weights(minilm_export: Path) -> None:
    for variant in ("int8", "fp32"):
        worst = batch_variance(BertOnnx(minilm_export, variant))
        assert all(diff <= 1e-5 for diff, _ in worst.values()), (variant, worst)


# -- layout: onnx only where a graph is read -------------------------------------------------------------


@pytest.mark.parametrize("variant", ["fp32", "int8", "bf16"])
def test_loading_and_running_does_not_import_onnx(tiny_export: Path, variant: str) -> None:
    code = f"""
import sys
from bertonnx import BertOnnx
model = BertOnnx({str(tiny_export)!r}, {variant!r})
model.embed(["a text"]), model.nsp("a", "b", truncation=True), model.tokenize("a")
print(sorted(name for name in sys.modules if name == "onnx" or name.startswith("onnx.")))
"""
    result = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, cwd=ROOT, timeout=300)
    assert result.returncode == 0, result.stderr
    assert result.stdout.strip() == "[]"


def test_inspect_of_a_corrupt_graph_is_one_line(
    tiny_export: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    import shutil

    copy = tmp_path / "model"
    shutil.copytree(tiny_export, copy)
    (copy / "model.onnx").write_bytes(b"\xff" * 64)
    assert main(["inspect", str(copy)]) == 2
    err = capsys.readouterr().err
    assert "model.onnx is not a valid ONNX model file" in err
    assert "re-run the export" in err
    (copy / "model.onnx").write_bytes(b"")
    assert main(["inspect", str(copy)]) == 2
    assert "model.onnx holds no ONNX graph" in capsys.readouterr().err
