"""The torch-free runtime: loading, tokenizing, batching, threads, and every error by its message."""

from __future__ import annotations

import json
import shutil
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import numpy as np
import pytest

from bertonnx import BertOnnx, BertOutput, ModelDirectoryError, RuntimeOptions
from bertonnx.manifest import MANIFEST_FILE

from .conftest import run_torch_free

pytestmark = pytest.mark.torch_free

PAIR = ("the weather is nice", "i agree with you")
PAIR_TOKENS = ["[CLS]", "the", "weather", "is", "nice", "[SEP]", "i", "agree", "with", "you", "[SEP]"]
PAIR_TYPES = [0, 0, 0, 0, 0, 0, 1, 1, 1, 1, 1]
WORDS = [
    "the",
    "quick",
    "brown",
    "fox",
    "jumps",
    "over",
    "a",
    "lazy",
    "dog",
    "while",
    "it",
    "rains",
    "in",
    "paris",
    "and",
    "tokyo",
]


def mixed_inputs(n: int, seed: int = 0) -> tuple[list[str], list[str]]:
    rng = np.random.default_rng(seed)
    texts = [" ".join(rng.choice(WORDS, size=int(rng.integers(1, 60)))) for _ in range(n)]
    pairs = [" ".join(rng.choice(WORDS, size=int(rng.integers(1, 30)))) for _ in range(n)]
    return texts, pairs


@pytest.fixture(scope="module")
def model(tiny_export: Path) -> BertOnnx:
    return BertOnnx(tiny_export, threads=1)


def test_runs_with_torch_blocked(tiny_export: Path) -> None:
    out = run_torch_free(
        f"""
from bertonnx import BertOnnx
m = BertOnnx({str(tiny_export)!r}, "optimized")
t = m.tokenize("the weather is nice", "i agree with you")
r = m(["the weather is nice"], ["i agree with you"])
print(t.tokens, t.type_ids, r.last_hidden_state.shape, r.pooler_output.shape, round(m.nsp(*{PAIR!r}), 6))
"""
    )
    assert f"{PAIR_TOKENS} {PAIR_TYPES} (1, 11, 32) (1, 32)" in out


def test_module_pair_tokens(model: BertOnnx) -> None:
    tok = model.tokenize(*PAIR)
    assert tok.tokens == PAIR_TOKENS
    assert tok.type_ids == PAIR_TYPES
    assert tok.attention_mask == [1] * 11
    assert tok.ids[0] == 101
    assert tok.ids[5] == 102
    assert tok.ids[-1] == 102


def test_baked_in_padding_and_truncation_are_ignored(tiny_export: Path, tmp_path: Path) -> None:
    copy = tmp_path / "model"
    shutil.copytree(tiny_export, copy)
    data = json.loads((copy / "tokenizer.json").read_text())
    data["padding"] = {"strategy": {"Fixed": 128}, "direction": "Right", "pad_to_multiple_of": None,
                       "pad_id": 0, "pad_type_id": 0, "pad_token": "[PAD]"}  # fmt: skip
    data["truncation"] = {"max_length": 8, "strategy": "LongestFirst", "stride": 0, "direction": "Right"}
    (copy / "tokenizer.json").write_text(json.dumps(data))
    manifest = json.loads((copy / MANIFEST_FILE).read_text())
    from bertonnx.manifest import sha256_file

    manifest["files"]["tokenizer.json"] = {
        "sha256": sha256_file(copy / "tokenizer.json"),
        "size": (copy / "tokenizer.json").stat().st_size,
    }
    (copy / MANIFEST_FILE).write_text(json.dumps(manifest))
    tok = BertOnnx(copy).tokenize(*PAIR)
    assert tok.tokens == PAIR_TOKENS  # neither cut to 8 nor padded to 128


def test_batched_equals_one_at_a_time_in_callers_order(model: BertOnnx) -> None:
    texts, pairs = mixed_inputs(40)
    texts[7], pairs[7] = PAIR
    together = model(texts, pairs, batch_size=6)
    assert len(together) == 40
    for i in range(40):
        alone = model([texts[i]], [pairs[i]])
        n = alone.lengths[0]
        assert together.lengths[i] == n
        np.testing.assert_allclose(together.token_states(i), alone.token_states(0), atol=1e-5, rtol=0)
        np.testing.assert_allclose(together.pooler_output[i], alone.pooler_output[0], atol=1e-5, rtol=0)
        np.testing.assert_allclose(together.nsp_logits[i], alone.nsp_logits[0], atol=1e-5, rtol=0)
        assert not together.last_hidden_state[i, n:].any()  # padding is zero, not garbage
    assert together.attention_mask.sum(axis=1).tolist() == together.lengths.tolist()


def test_generator_input_spanning_several_windows(model: BertOnnx, monkeypatch: pytest.MonkeyPatch) -> None:
    texts, _ = mixed_inputs(300, seed=3)
    whole = model.embed(texts, max_batch_tokens=16384)
    monkeypatch.setattr("bertonnx.driver.SORT_WINDOW_TOKENS", 200)  # a window every few texts
    monkeypatch.setattr("bertonnx.driver.TOKENIZE_CHUNK_TEXTS", 7)
    from_list = model.embed(texts, batch_size=2)
    from_generator = model.embed((t for t in texts), batch_size=2, max_batch_tokens=64)
    assert from_generator.shape == (len(texts), 32)
    np.testing.assert_allclose(from_list, whole, atol=1e-5, rtol=0)
    np.testing.assert_allclose(from_generator, whole, atol=1e-5, rtol=0)


def test_concurrent_calls_match_serial(model: BertOnnx) -> None:
    check_concurrent_calls_match_serial(model)


def check_concurrent_calls_match_serial(model: BertOnnx) -> None:
    """8 threads calling one model give exactly the serial results (shared by every engine's tests)."""
    texts, pairs = mixed_inputs(16, seed=5)
    serial = [model(texts[i::8], pairs[i::8]) for i in range(8)]
    with ThreadPoolExecutor(max_workers=8) as pool:
        parallel = list(pool.map(lambda i: model(texts[i::8], pairs[i::8]), range(8)))
    for a, b in zip(serial, parallel, strict=True):
        np.testing.assert_array_equal(a.pooler_output, b.pooler_output)
        np.testing.assert_array_equal(a.last_hidden_state, b.last_hidden_state)


def test_empty_input_gives_empty_arrays(model: BertOnnx) -> None:
    out = model([])
    assert out.last_hidden_state is not None
    assert out.last_hidden_state.shape == (0, 0, 32)
    assert out.pooler_output.shape == (0, 32)
    assert out.nsp_logits.shape == (0, 2)
    assert model.embed([]).shape == (0, 32)
    assert model.nsp([], []).shape == (0,)


def test_single_string_is_one_input(model: BertOnnx) -> None:
    assert isinstance(model("hello"), BertOutput)
    assert len(model("hello")) == 1
    assert model.embed("hello").shape == (1, 32)


def test_nsp_single_and_batch(model: BertOnnx) -> None:
    p = model.nsp(*PAIR)
    assert isinstance(p, float)
    assert 0.0 < p < 1.0
    batch = model.nsp([PAIR[0], "x"], [PAIR[1], "y"])
    assert batch.shape == (2,)
    assert batch[0] == pytest.approx(p, abs=1e-6)
    logits = model([PAIR[0]], [PAIR[1]]).nsp_logits[0].astype(np.float64)
    assert p == pytest.approx(np.exp(logits[0]) / np.exp(logits).sum(), abs=1e-6)


def test_embed_poolings(model: BertOnnx) -> None:
    texts = ["a short one", "a much longer sentence with many more words in it"]
    full = model(texts)
    np.testing.assert_allclose(model.embed(texts, "pooler"), full.pooler_output, atol=1e-6)
    np.testing.assert_allclose(model.embed(texts, "cls"), full.last_hidden_state[:, 0], atol=1e-6)
    means = np.stack([full.token_states(i).mean(axis=0) for i in range(2)])
    np.testing.assert_allclose(model.embed(texts, "mean"), means, atol=1e-5)
    unit = model.embed(texts, "mean", normalize=True)
    np.testing.assert_allclose(np.linalg.norm(unit, axis=1), 1.0, atol=1e-5)


def test_too_long_input_names_index_and_length(model: BertOnnx) -> None:
    long_text = "word " * 600
    with pytest.raises(ValueError, match=r"input 2 has 602 tokens, more than max_length=512\. Pass truncation=True"):
        model(["a", "b", long_text])
    out = model(["a", "b", long_text], truncation=True)
    assert out.lengths.tolist() == [3, 3, 512]


def test_pair_truncation_is_longest_first(model: BertOnnx) -> None:
    tok = model.tokenize("one two three four five six seven eight", "alpha beta", truncation=True, max_length=9)
    assert tok.tokens == ["[CLS]", "one", "two", "three", "four", "[SEP]", "alpha", "beta", "[SEP]"]
    assert tok.type_ids == [0] * 6 + [1] * 3


@pytest.mark.parametrize(
    ("call", "error", "message"),
    [
        (lambda m: m(["ok", None]), TypeError, r"texts\[1\] is None; every input must be a str"),
        (lambda m: m([1.5]), TypeError, r"texts\[0\] is float"),
        (lambda m: m(b"bytes"), TypeError, "texts must be a str or an iterable of str, got bytes"),
        (lambda m: m(["a", "b"], ["x"]), ValueError, "texts and text_pairs differ in length"),
        (lambda m: m(["a"], ["x", "y"]), ValueError, "texts and text_pairs differ in length: text_pairs has more"),
        (lambda m: m(["a"], batch_size=0), ValueError, "batch_size must be >= 1, got 0"),
        (lambda m: m(["a"], truncation="yes"), TypeError, "truncation must be a bool"),
        (lambda m: m(["a"], max_length=513), ValueError, "max_length must be between 2 and the model's 512"),
        (lambda m: m.embed(["a"], "max"), ValueError, "unknown pooling 'max'; expected one of pooler, cls, mean"),
        (lambda m: m.nsp("a", ["b"]), TypeError, "both be strings or both be lists"),
        (lambda m: m.tokenize(None), TypeError, "text must be a str, got NoneType"),
    ],
)
def test_input_errors(model: BertOnnx, call, error: type[Exception], message: str) -> None:  # type: ignore[no-untyped-def]
    with pytest.raises(error, match=message):
        call(model)


def test_unknown_and_absent_variants(tiny_export: Path, tmp_path: Path) -> None:
    with pytest.raises(ValueError, match="unknown variant 'fp16'; expected one of fp32, optimized, int8"):
        BertOnnx(tiny_export, "fp16")
    with pytest.raises(ValueError, match="verify must be one of size, sha256"):
        BertOnnx(tiny_export, verify="md5")


def test_not_an_export(tmp_path: Path) -> None:
    with pytest.raises(ModelDirectoryError, match="does not exist"):
        BertOnnx(tmp_path / "missing")
    with pytest.raises(ModelDirectoryError, match=r"is not a bertonnx export: it has no bertonnx\.json"):
        BertOnnx(tmp_path)
    with pytest.raises(TypeError, match=r"model_dir must be a str or pathlib\.Path, got int"):
        BertOnnx(3)  # type: ignore[arg-type]


def test_missing_truncated_and_corrupt_files(tiny_export: Path, tmp_path: Path) -> None:
    copy = tmp_path / "model"
    shutil.copytree(tiny_export, copy)
    (copy / "model_int8.onnx").unlink()
    with pytest.raises(ModelDirectoryError, match=r"model_int8\.onnx is missing"):
        BertOnnx(copy, "int8")
    (copy / "model_optimized.onnx.data").rename(copy / "elsewhere.data")
    with pytest.raises(ModelDirectoryError, match=r"model_optimized\.onnx\.data is missing"):
        BertOnnx(copy, "optimized")
    (copy / "elsewhere.data").rename(copy / "model_optimized.onnx.data")
    with (copy / "model.onnx").open("r+b") as handle:
        handle.seek(1000)
        handle.write(b"\x00corrupt\x00")  # same size, different bytes
    BertOnnx(copy)  # size matches: the default check is by size
    with pytest.raises(ModelDirectoryError, match=r"model.onnx has sha256 [0-9a-f]+ but the manifest records"):
        BertOnnx(copy, verify="sha256")
    with (copy / "model_optimized.onnx").open("r+b") as handle:
        handle.truncate(1000)
    with pytest.raises(ModelDirectoryError, match="is 1000 bytes but the manifest records"):
        BertOnnx(copy, "optimized")
    (copy / MANIFEST_FILE).write_text("{not json")
    with pytest.raises(ModelDirectoryError, match=r"bertonnx\.json is not readable JSON"):
        BertOnnx(copy)


def test_runtime_options_are_checked() -> None:
    with pytest.raises(ValueError, match="threads must be between 1 and 1024, got 0"):
        RuntimeOptions(threads=0)
    with pytest.raises(ValueError, match="threads must be between 1 and 1024, got 100000000000000000000"):
        RuntimeOptions(threads=10**20)  # was onnxruntime's binding error
    with pytest.raises(ValueError, match="graph_optimization_level must be one of disable, basic, extended, all"):
        RuntimeOptions(graph_optimization_level="max")
    assert RuntimeOptions().intra_op_threads >= 1


def test_options_reach_the_session(tiny_export: Path) -> None:
    m = BertOnnx(tiny_export, options=RuntimeOptions(threads=1, allow_spinning=False, enable_cpu_mem_arena=False))
    assert m.session.get_session_options().intra_op_num_threads == 1
    assert m.session.get_session_options().enable_cpu_mem_arena is False
    assert m.session.get_session_options().get_session_config_entry("session.intra_op.allow_spinning") == "0"


def test_an_input_refused_before_it_was_all_counted_reads_as_more_than_the_limit() -> None:
    """A very long text is refused without tokenizing all of it (its length unknown): every edge says "more than
    N tokens", not "has more tokens, more than"."""
    from bertonnx.command import describe_error
    from bertonnx.corpus.errors import row_reason
    from bertonnx.errors import InputTooLongError

    error = InputTooLongError(0, None, 8192)
    assert str(error).startswith("input 0 has more than max_length=8192 tokens. Pass truncation=True")
    assert describe_error(error).startswith("input 0 has more than the limit of 8192 tokens; pass --truncation")
    assert row_reason(error).startswith("has more than the model's 8192 tokens; cut it")
    assert str(InputTooLongError(1, 602, 512)).startswith("input 1 has 602 tokens, more than max_length=512.")
