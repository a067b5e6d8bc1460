"""Parity against PyTorch: every variant, real and seeded weights, exact shapes, padding, pairs, and the CLI.

Exact-length inputs are fed as ids straight to onnxruntime and to transformers' ``BertForPreTraining``
(rebuilt as the export built it, by ``export.parity.load_reference``); real text goes through
``BertOnnx`` (tokenizer, truncation, batching) against the Python ``BertTokenizer`` + PyTorch. PyTorch
runs first in every comparison and onnxruntime sessions never spin, so neither slows the other.
"""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
from pathlib import Path
from typing import Any

import numpy as np
import onnx
import pytest
import torch

from bertonnx import BertOnnx, RuntimeOptions
from bertonnx.manifest import (
    MANIFEST_FILE,
    OUTPUT_NAMES,
    VARIANT_FILES,
    read_manifest,
    sha256_file,
)
from bertonnx.session import open_variant_session
from bertonnx_export import gate, parity
from bertonnx_export.graph import BertWithHeads

from . import corpus
from .conftest import ROOT, run_torch_free

BATCHES = (1, 2, 7, 32)
SEQUENCES = (1, 2, 16, 128, 511, 512)
#: MiniLM is small: the full cross product. bert-base: every batch size and every length, six shapes.
MINILM_SHAPES = tuple((b, s) for b in BATCHES for s in SEQUENCES)
BERT_BASE_SHAPES = ((1, 512), (2, 511), (7, 128), (32, 16), (32, 2), (7, 1))
SOURCES = {"minilm": MINILM_SHAPES, "bert_base": BERT_BASE_SHAPES}
EXACT_MAX_ABS = 1e-4
CLS_ID, SEP_ID = 101, 102
#: Rows of a padded batch that are also run alone (besides row 0, which is never padded).
ALONE_ROWS = 2
#: int8 limits per weight source: (min cosine hidden per token, pooler, NSP logits, mean-pooled, min NSP
#: argmax agreement). Set just below the worst case measured over all shapes and texts here (torch
#: 2.13.0, onnxruntime 1.32.0); measured worst values in the comments. A worse int8 fails the test.
INT8_LIMITS: dict[str, dict[str, float]] = {
    "minilm": {  # real weights; the seeded NSP head's logits are ~0.01-0.08, so their cosine is noisy
        "last_hidden_state": 0.86,  # measured 0.8702 (a random-id token at 32x511)
        "pooler_output": 0.985,  # measured 0.9905
        "nsp_logits": 0.68,  # measured 0.6920 (abs diff 0.0115 on logits of norm ~0.01)
        "mean_pooled": 0.965,  # measured 0.9711
        "nsp_argmax_agreement": 0.99,  # measured 1.0
    },
    "bert_base": {  # seeded random weights (std 0.02): small activations, so int8 is close on states
        "last_hidden_state": 0.9993,  # measured 0.99957
        "pooler_output": 0.999,  # measured 0.99949
        "nsp_logits": 0.57,  # measured 0.591 (text input; seeded head, logits ~0.02)
        "mean_pooled": 0.9993,  # measured 0.99957
        "nsp_argmax_agreement": 0.98,  # measured 0.990 (1 of 102 texts flips; 1.0 on every exact shape)
    },
}
#: bf16 (OpenVINO, the accurate fast path): the promise of issue 6 is pooler and mean-pooled cosine
#: >= 0.999 and NSP agreement >= 99 % on real weights; per-token hidden states get the measured limit.
FAST_PATH_PROMISE = 0.999
BF16_LIMITS: dict[str, dict[str, float]] = {
    source: {
        "last_hidden_state": FAST_PATH_PROMISE,  # measured: see the closing note of issue 6
        "pooler_output": FAST_PATH_PROMISE,
        "nsp_logits": 0.99,
        "mean_pooled": FAST_PATH_PROMISE,
        "nsp_argmax_agreement": 0.99,
    }
    for source in ("minilm", "bert_base")
}
#: On a CPU without VNNI (AVX512-VNNI or AVX-VNNI), onnxruntime multiplies u8 activations by s8 weights
#: with AVX2's VPMADDUBSW, whose int16 sums saturate (onnxruntime's quantization docs say so and suggest
#: reduce_range), so the same int8 file loses more. Measured worst values on a 2-core AMD EPYC with AVX2
#: only (same versions) in the comments; the limits sit below them. Since the int8 weights bound their K pairs
#: (export/variants.py INT8_PAIR_MAX, 2026-12-03) nothing saturates: on that AVX2 CPU all 25 MiniLM int8
#: cases pass INT8_LIMITS too (bert_base not re-measured there), so these looser limits may now be dropped.
INT8_LIMITS_WITHOUT_VNNI: dict[str, dict[str, float]] = {
    "minilm": {
        "last_hidden_state": 0.80,  # measured 0.8328 (32x511)
        "pooler_output": 0.98,  # measured 0.9848 (a row of 2x511 run alone)
        "nsp_logits": 0.60,  # measured 0.9348 at 2x16 (seeded head: near-zero logits, noisy cosine)
        "mean_pooled": 0.95,  # measured 0.9585 (32x511)
        "nsp_argmax_agreement": 0.5,  # measured 0.5: 1 of the 2 rows of 2x16 flips on a near-tie seeded head
    },
    "bert_base": {
        "last_hidden_state": 0.998,  # measured 0.99899
        "pooler_output": 0.998,  # measured 0.99884
        "nsp_logits": 0.57,  # as with VNNI: seeded head, logits ~0.02
        "mean_pooled": 0.998,  # measured 0.99899
        "nsp_argmax_agreement": 0.93,  # measured 0.9375 (2 of 32 rows of 32x16 flip on near-ties)
    },
}


def cpu_has_vnni() -> bool:
    """Whether this CPU has AVX512-VNNI or AVX-VNNI (read from /proc/cpuinfo; False elsewhere)."""
    try:
        flags = Path("/proc/cpuinfo").read_text(encoding="utf-8", errors="replace").split()
    except OSError:
        return False
    return "avx512_vnni" in flags or "avx_vnni" in flags


#: Both heads here are seeded (bert-base is all random, MiniLM has no trained NSP head), so NSP logits are
#: ~0.02 and a lossy variant can flip a near-tie. A flip moves the NSP probability across 0.5, so when no
#: probability moved more than this, every flip was a tie within it and the agreement limit is not held.
NEAR_TIE_PROBABILITY = 0.01
LOSSY_LIMITS = {"int8": INT8_LIMITS if cpu_has_vnni() else INT8_LIMITS_WITHOUT_VNNI, "bf16": BF16_LIMITS}
MODULE_PAIR = ("the weather is nice", "i agree with you")
PAIR_TOKENS = ["[CLS]", "the", "weather", "is", "nice", "[SEP]", "i", "agree", "with", "you", "[SEP]"]
PAIR_TYPES = [0, 0, 0, 0, 0, 0, 1, 1, 1, 1, 1]

_REFERENCES: dict[str, Any] = {}
_SESSIONS: dict[tuple[str, str], Any] = {}
_EXPECTED: dict[tuple[str, int, int], dict[str, Any]] = {}


def _export(request: pytest.FixtureRequest, source: str) -> Path:
    path: Path = request.getfixturevalue(f"{source}_export")
    return path


def _reference(request: pytest.FixtureRequest, source: str) -> BertWithHeads:
    if source not in _REFERENCES:
        manifest = read_manifest(_export(request, source))
        checkpoint = str(request.getfixturevalue("minilm_checkpoint")) if source == "minilm" else None
        _REFERENCES[source] = parity.load_reference(manifest, checkpoint)
    return _REFERENCES[source]


def _session(directory: Path, variant: str) -> Any:
    """The variant's session straight from its file (onnxruntime, or OpenVINO for bf16), spinning off."""
    key = (str(directory), variant)
    if key not in _SESSIONS:
        _SESSIONS[key] = open_variant_session(
            directory / VARIANT_FILES[variant], variant, RuntimeOptions(allow_spinning=False)
        )
    return _SESSIONS[key]


def make_feeds(batch: int, seq: int, seed: int) -> tuple[dict[str, np.ndarray], list[int]]:
    """Exact-length inputs: row 0 fills ``seq``, the rest are shorter and right-padded; odd rows and row 0
    are pairs (segment 1 after the middle [SEP])."""
    rng = np.random.default_rng(seed)
    lengths = [seq] + [int(rng.integers(1, seq + 1)) for _ in range(batch - 1)]
    feeds = {name: np.zeros((batch, seq), dtype=np.int64) for name in ("input_ids", "attention_mask", "token_type_ids")}
    for row, n in enumerate(lengths):
        ids = rng.integers(1000, 30000, size=n)
        ids[0] = CLS_ID
        if n > 1:
            ids[-1] = SEP_ID
        if (row == 0 or row % 2) and n >= 5:
            middle = n // 2
            ids[middle] = SEP_ID
            feeds["token_type_ids"][row, middle + 1 : n] = 1
        feeds["input_ids"][row, :n] = ids
        feeds["attention_mask"][row, :n] = 1
    return feeds, lengths


def _torch(model: BertWithHeads, feeds: dict[str, np.ndarray]) -> dict[str, np.ndarray]:
    with torch.inference_mode():
        out = model(**{k: torch.from_numpy(v) for k, v in feeds.items()})
    return {name: out[name].float().numpy() for name in OUTPUT_NAMES}


def _ort(session: Any, feeds: dict[str, np.ndarray]) -> dict[str, np.ndarray]:
    return dict(zip(OUTPUT_NAMES, session.run(list(OUTPUT_NAMES), feeds), strict=True))


def _alone(feeds: dict[str, np.ndarray], row: int, n: int) -> dict[str, np.ndarray]:
    return {k: v[row : row + 1, :n].copy() for k, v in feeds.items()}


def _cosines(a: np.ndarray, b: np.ndarray) -> np.ndarray:
    a64, b64 = a.astype(np.float64), b.astype(np.float64)
    return np.sum(a64 * b64, -1) / np.maximum(np.linalg.norm(a64, axis=-1) * np.linalg.norm(b64, axis=-1), 1e-30)


def figures(
    references: list[dict[str, np.ndarray]], candidates: list[dict[str, np.ndarray]], lengths: list[list[int]]
) -> dict[str, float]:
    """The gate's worst-case figures (max abs, min cosine per output, NSP agreement) over calls, plus the
    minimum cosine of mean-pooled hidden states (mean over each input's valid tokens)."""
    cases = [gate.Case(f"call {i}", {}, n) for i, n in enumerate(lengths)]
    found = gate.compare(cases, references, candidates)
    cosines = [
        _cosines(r[:n].astype(np.float64).mean(0), g[:n].astype(np.float64).mean(0))
        for ref, got, ns in zip(references, candidates, lengths, strict=True)
        for r, g, n in zip(ref["last_hidden_state"], got["last_hidden_state"], ns, strict=True)
    ]
    found["mean_pooled_min_cosine"] = float(min(cosines))
    return found


def check(source: str, variant: str, found: dict[str, float], what: str) -> None:
    """fp32/optimized: every output within EXACT_MAX_ABS. int8 and bf16: their cosine and agreement limits."""
    if variant not in LOSSY_LIMITS:
        for name in OUTPUT_NAMES:
            assert found[f"{name}_max_abs"] <= EXACT_MAX_ABS, f"{what}: {name} {found}"
        assert found["nsp_argmax_agreement"] == 1.0, what
        return
    limits = LOSSY_LIMITS[variant][source]
    for name in OUTPUT_NAMES:
        if (
            name == "nsp_logits"
            and found["nsp_probability_max_abs"] <= gate.LOSSY_THRESHOLDS[variant]["nsp_probability_max_abs"]
        ):
            continue  # the seeded heads' logits are ~0.02: their cosine is noise when no probability moved
        assert found[f"{name}_min_cosine"] >= limits[name], f"{what}: {name} {found}"
    assert found["mean_pooled_min_cosine"] >= limits["mean_pooled"], f"{what}: mean-pooled {found}"
    if found["nsp_argmax_agreement"] < limits["nsp_argmax_agreement"]:
        assert found["nsp_probability_max_abs"] <= NEAR_TIE_PROBABILITY, f"{what}: NSP flips past near-ties {found}"


def _expected(request: pytest.FixtureRequest, source: str, batch: int, seq: int) -> dict[str, Any]:
    """PyTorch outputs of one shape (the padded batch, and chosen rows alone), computed once."""
    key = (source, batch, seq)
    if key not in _EXPECTED:
        model = BertWithHeads(_reference(request, source).model).eval()
        feeds, lengths = make_feeds(batch, seq, seed=batch * 1000 + seq)
        rows = sorted(range(batch), key=lambda r: lengths[r])[:ALONE_ROWS]
        alone = {row: _torch(model, _alone(feeds, row, lengths[row])) for row in rows}
        _EXPECTED[key] = {"feeds": feeds, "lengths": lengths, "reference": _torch(model, feeds), "alone": alone}
    return _EXPECTED[key]


SHAPE_PARAMS = [
    pytest.param(source, variant, batch, seq, marks=pytest.mark.slow, id=f"{source}-{variant}-{batch}x{seq}")
    for source, shapes in SOURCES.items()
    for variant in VARIANT_FILES
    for batch, seq in shapes
]


@pytest.mark.parametrize(("source", "variant", "batch", "seq"), SHAPE_PARAMS)
def test_output_parity_at_exact_shapes(
    request: pytest.FixtureRequest, source: str, variant: str, batch: int, seq: int
) -> None:
    expected = _expected(request, source, batch, seq)
    feeds, lengths = expected["feeds"], expected["lengths"]
    session = _session(_export(request, source), variant)
    got = _ort(session, feeds)
    assert got["last_hidden_state"].shape == expected["reference"]["last_hidden_state"].shape
    assert got["pooler_output"].shape == (batch, expected["reference"]["pooler_output"].shape[1])
    assert got["nsp_logits"].shape == (batch, 2)
    check(source, variant, figures([expected["reference"]], [got], [lengths]), f"{batch}x{seq} batch")
    # padding: each padded row's valid outputs are those of the row run alone (PyTorch, and this variant)
    for row, reference_alone in expected["alone"].items():
        n = lengths[row]
        in_batch = {name: got[name][row : row + 1] for name in OUTPUT_NAMES}
        in_batch["last_hidden_state"] = in_batch["last_hidden_state"][:, :n]
        alone = _ort(session, _alone(feeds, row, n))
        check(source, variant, figures([reference_alone], [in_batch], [[n]]), f"row {row} ({n} tokens) in the batch")
        check(source, variant, figures([reference_alone], [alone], [[n]]), f"row {row} ({n} tokens) run alone")
    if seq >= 5:
        assert feeds["token_type_ids"][0].max() == 1  # row 0 is a pair with segment 1


def _texts() -> list[tuple[str, str | None]]:
    pairs: list[tuple[str, str | None]] = [(a, b) for a, b in corpus.pairs(n=40)]
    singles: list[tuple[str, str | None]] = [(t, None) for texts in corpus.texts(per_class=4).values() for t in texts]
    return [*gate.GATE_INPUTS, *pairs, *singles]


_TEXT_REFERENCE: dict[str, Any] = {}


@pytest.mark.slow
@pytest.mark.parametrize("source", list(SOURCES))
@pytest.mark.parametrize("variant", list(VARIANT_FILES))
def test_text_through_runtime_matches_pytorch(request: pytest.FixtureRequest, source: str, variant: str) -> None:
    directory = _export(request, source)
    if source not in _TEXT_REFERENCE:
        _TEXT_REFERENCE[source] = parity.reference_run(_reference(request, source), _texts(), 512)
    inputs, cases, reference = _TEXT_REFERENCE[source]
    model = BertOnnx(directory, variant, options=RuntimeOptions(allow_spinning=False))
    ids, candidate = parity.runtime_run(model, inputs)  # length-sorted, padded batches of singles and pairs
    assert ids == [i.ids for i in inputs]
    found = figures(reference, candidate, [case.lengths for case in cases])
    check(source, variant, found, f"{len(inputs)} texts through BertOnnx")


@pytest.mark.slow
def test_module_facts_through_runtime_and_pytorch(bert_base_export: Path) -> None:
    from transformers import BertConfig, BertModel, BertTokenizer

    runtime = json.loads(
        run_torch_free(
            f"""
import json
from bertonnx import BertOnnx
from bertonnx.info import describe, mean_pooler_cosine
from bertonnx.manifest import read_manifest
facts = describe(read_manifest({str(bert_base_export)!r}))
m = BertOnnx({str(bert_base_export)!r})
t = m.tokenize(*{MODULE_PAIR!r})
r = m([{MODULE_PAIR[0]!r}], [{MODULE_PAIR[1]!r}])
print(json.dumps({{"config": facts["config"], "parameters": facts["parameters"]["counts"], "tokens": t.tokens,
    "type_ids": t.type_ids, "hidden": list(r.last_hidden_state.shape), "pooler": list(r.pooler_output.shape),
    "cosine": mean_pooler_cosine(r.token_states(0), t.tokens, r.pooler_output[0])}}))
"""
        )
    )
    config = BertConfig.from_pretrained(bert_base_export)
    numbers = (12, 12, 768, 3072, 30522, 512, 2)
    keys = ("num_hidden_layers", "num_attention_heads", "hidden_size", "intermediate_size", "vocab_size")
    keys += ("max_position_embeddings", "type_vocab_size")
    assert tuple(runtime["config"][k] for k in keys) == numbers
    assert tuple(getattr(config, k) for k in keys) == numbers
    bert = BertModel(config)
    assert sum(p.numel() for p in bert.parameters()) == 109_482_240 == runtime["parameters"]["bert_model"]
    assert bert.embeddings.word_embeddings.weight.numel() == 23_440_896 == runtime["parameters"]["token_embeddings"]

    slow = BertTokenizer.from_pretrained(bert_base_export)
    enc = slow(*MODULE_PAIR, return_token_type_ids=True)
    assert slow.convert_ids_to_tokens(enc["input_ids"]) == PAIR_TOKENS == runtime["tokens"]
    assert enc["token_type_ids"] == PAIR_TYPES == runtime["type_ids"]

    reference = BertWithHeads(parity.load_reference(read_manifest(bert_base_export), None).model).eval()
    with torch.inference_mode():
        out = reference(**{k: torch.tensor([enc[k]]) for k in ("input_ids", "attention_mask", "token_type_ids")})
    assert tuple(out["last_hidden_state"].shape) == (1, 11, 768) == tuple(runtime["hidden"])
    assert tuple(out["pooler_output"].shape) == (1, 768) == tuple(runtime["pooler"])
    keep = [i for i, token in enumerate(PAIR_TOKENS) if token not in ("[CLS]", "[SEP]", "[PAD]")]
    mean = out["last_hidden_state"][0, keep].double().mean(0)
    pooled = out["pooler_output"][0].double()
    cosine = float(torch.dot(mean, pooled) / (mean.norm() * pooled.norm()))
    assert cosine == pytest.approx(runtime["cosine"], abs=1e-4)


# -- the command ------------------------------------------------------------------------------------


def _parity_cli(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "bertonnx.cli", "parity", *args], capture_output=True, text=True, cwd=ROOT, timeout=600
    )


def _swap_pooler_tanh(model: onnx.ModelProto) -> None:
    (tanh,) = [node for node in model.graph.node if node.op_type == "Tanh"]
    tanh.op_type = "Sigmoid"


def _ignore_token_type_ids(model: onnx.ModelProto) -> None:
    """Multiply token_type_ids by zero before the segment-embedding lookup: every token is segment 0."""
    zero = onnx.helper.make_tensor("zero_types", onnx.TensorProto.INT64, [], [0])
    model.graph.initializer.append(zero)
    model.graph.node.insert(0, onnx.helper.make_node("Mul", ["token_type_ids", "zero_types"], ["ignored_types"]))
    users = [n for n in model.graph.node if n.op_type != "Mul" and "token_type_ids" in n.input]
    assert users
    for node in users:
        node.input[list(node.input).index("token_type_ids")] = "ignored_types"


def _tampered_copy(tiny_export: Path, directory: Path, tamper: Any) -> Path:
    shutil.copytree(tiny_export, directory)
    path = directory / VARIANT_FILES["fp32"]
    model = onnx.load(str(path))
    tamper(model)
    onnx.save(model, str(path))
    manifest = json.loads((directory / MANIFEST_FILE).read_text())
    manifest["files"][path.name] = {"sha256": sha256_file(path), "size": path.stat().st_size}
    (directory / MANIFEST_FILE).write_text(json.dumps(manifest, indent=2))
    return directory


@pytest.mark.parametrize(
    ("tamper", "failing_output"),
    [(_swap_pooler_tanh, "pooler_output"), (_ignore_token_type_ids, "last_hidden_state")],
    ids=["pooler-sigmoid", "token-types-ignored"],
)
def test_parity_command_fails_on_a_wrong_model(
    tiny_export: Path, tiny_checkpoint: Path, tmp_path: Path, tamper: Any, failing_output: str
) -> None:
    broken = _tampered_copy(tiny_export, tmp_path / "broken", tamper)
    report = tmp_path / "report.md"
    result = _parity_cli(str(broken), "--reference", str(tiny_checkpoint), "--report", str(report))
    assert result.returncode == parity.EXIT_BREACH, result.stderr
    assert f"FAIL fp32: {failing_output} max abs diff" in result.stdout
    assert f"| fp32 | {failing_output} |" in report.read_text()
    assert "optimized: " not in result.stdout  # the untouched variants still pass


def test_parity_command_passes_an_untouched_export(tiny_export: Path, tiny_checkpoint: Path, tmp_path: Path) -> None:
    pairs = tmp_path / "pairs.tsv"
    tie = " ".join(["word"] * 300)  # a pair of equal sides over the limit: the fast tokenizer's tie-break
    pairs.write_text(
        f"the weather is nice\ti agree with you\na single text\n\nwhat now?\tnothing\n{tie}\t{tie}\n", encoding="utf-8"
    )
    report = tmp_path / "out" / "parity.md"
    report.parent.mkdir()  # an output's folder must exist (a missing one is refused before any work)
    result = _parity_cli(
        str(tiny_export), "--reference", str(tiny_checkpoint), "--pairs", str(pairs), "--report", str(report)
    )
    assert result.returncode == parity.EXIT_OK, result.stdout + result.stderr
    assert f"reference: transformers BertForPreTraining (PyTorch, fp32) from `{tiny_checkpoint}`" in result.stdout
    assert "weights: pretrained\n" in result.stdout
    assert "{" not in result.stdout  # words, not Python dicts
    text = report.read_text()
    assert "- verdict: pass" in text
    assert "18 built-in + 4 from --pairs" in text
    assert text.count("| pass |") == 4 * len(VARIANT_FILES)
    assert [p.name for p in report.parent.iterdir()] == ["parity.md"]  # no temporary file left behind


def test_parity_json(tiny_export: Path, capsys: pytest.CaptureFixture[str]) -> None:
    code = parity.main([str(tiny_export), "--variants", "fp32", "--json"])  # reference: the manifest's source
    payload = json.loads(capsys.readouterr().out)
    assert code == parity.EXIT_OK
    assert payload["passed"] is True
    assert list(payload["variants"]) == ["fp32"]
    assert payload["variants"]["fp32"]["figures"]["pooler_output_max_abs"] <= EXACT_MAX_ABS


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["{missing}"], "does not exist"),
        (["{not_export}"], "is not a bertonnx export"),
        (["{export}", "--reference", "{missing}"], "cannot load the PyTorch reference"),
        (["{export}", "--variants", "fp16"], "--variants must name variants present in"),
        (["{export}", "--pairs", "{missing}"], "nope does not exist; check the path"),
    ],
    ids=["missing-dir", "not-an-export", "missing-reference", "unknown-variant", "missing-pairs"],
)
def test_parity_bad_usage_exits_2(
    tiny_export: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str], args: list[str], message: str
) -> None:
    (tmp_path / "plain").mkdir()
    paths = {"missing": str(tmp_path / "nope"), "not_export": str(tmp_path / "plain"), "export": str(tiny_export)}
    code = parity.main([a.format(**paths) for a in args])
    assert code == parity.EXIT_USAGE
    assert message in capsys.readouterr().err
