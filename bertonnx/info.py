"""The facts ``bertonnx inspect`` and ``walkthrough`` report, read torch-free from the export.

Parameter counts come from the ONNX graph's own initializers (not from the manifest), so they prove what
the file holds: the total of float weights, the token-embedding table (the initializer gathered by
``input_ids``), the pooler (weights between ``last_hidden_state`` and ``pooler_output``) and the NSP head
(weights between ``pooler_output`` and ``nsp_logits``). The graph is read with the ``onnx`` package,
without its external weights; ``onnx`` is imported only here, never on ``BertOnnx``'s load path.
"""

from __future__ import annotations

import math
from collections import deque
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np

from .errors import ModelDirectoryError
from .manifest import ONNXRUNTIME_BACKEND, VARIANT_BACKENDS, VARIANT_FILES, Manifest, refusal_text
from .sentence import BLOCK as SENTENCE_BLOCK
from .sentence import read_pipeline

if TYPE_CHECKING:
    import onnx

__all__ = [
    "COUNTABLE_VARIANTS",
    "count_parameters",
    "describe",
    "format_figure",
    "mean_pooler_cosine",
    "read_graph",
    "source_text",
    "weights_text",
]

ONNX_FLOAT = 1  # onnx.TensorProto.FLOAT
#: Variants whose weights are float initializers (int8 weights are stored quantized).
COUNTABLE_VARIANTS = ("fp32", "optimized")
#: Input index of the word-embedding table in onnxruntime's fused EmbedLayerNormalization node.
EMBED_LAYER_NORM_WORD_INPUT = 2


def read_graph(path: Path) -> onnx.ModelProto:
    """The ONNX model at ``path``, without its external weights (initializers keep names, types and dims).

    Raises:
        ModelDirectoryError: the file is missing, or is not an ONNX model holding a graph.
    """
    import onnx

    try:
        model = onnx.load(str(path), load_external_data=False)
    except FileNotFoundError:
        raise ModelDirectoryError(f"{path} is missing; re-run the export") from None
    except Exception as exc:  # noqa: BLE001 - protobuf's DecodeError and onnx's own errors
        raise ModelDirectoryError(f"{path} is not a valid ONNX model file ({exc}); re-run the export") from None
    if not model.graph.node:
        raise ModelDirectoryError(f"{path} holds no ONNX graph; re-run the export")
    return model


def _shape(value: onnx.ValueInfoProto) -> list[int | str | None]:
    """Each axis as its size, its symbolic name, or ``None`` when unknown."""
    return [d.dim_value if d.HasField("dim_value") else (d.dim_param or None) for d in value.type.tensor_type.shape.dim]


def _weights_between(graph: onnx.GraphProto, target: str, stop: str) -> set[str]:
    """Names of float initializers feeding ``target``, walking back from it until tensor ``stop``."""
    producers = {out: node for node in graph.node for out in node.output}
    floats = {t.name for t in graph.initializer if t.data_type == ONNX_FLOAT}
    found: set[str] = set()
    seen: set[str] = set()
    queue = deque([target])
    while queue:
        tensor = queue.popleft()
        if tensor in seen or tensor == stop:
            continue
        seen.add(tensor)
        if tensor in floats:
            found.add(tensor)
        elif tensor in producers:
            queue.extend(producers[tensor].input)
    return found


#: Head outputs of a main graph -> (count name, the tensor the head starts from: the pooler's output where the
#: graph has one, else the last hidden states, as RoBERTa's classifier reads its first token's state).
HEAD_OUTPUTS = {
    "nsp_logits": ("nsp_head", "pooler_output"),
    "logits": ("classifier_head", "pooler_output"),
    "token_logits": ("token_classifier_head", "last_hidden_state"),
    "start_logits": ("qa_head", "last_hidden_state"),
    "end_logits": ("qa_head", "last_hidden_state"),
    "rtd_logits": ("discriminator_head", "last_hidden_state"),
    "choice_logits": ("choice_head", "pooler_output"),
}
#: Shape-only steps between ``input_ids`` and the word-embedding lookup (a multiple-choice graph flattens its
#: choices first).
_INDEX_STEPS = ("Reshape", "Cast", "Identity", "Unsqueeze", "Squeeze", "Flatten")


def count_parameters(model: onnx.ModelProto) -> dict[str, int]:
    """Count parameters from the initializers of an fp32 (plain or fused) BERT main graph.

    Returns:
        ``bert_model`` (encoder + embeddings + pooler when the graph has one), ``token_embeddings``,
        ``pooler`` (when present), each head the graph has (``nsp_head``, ``classifier_head``,
        ``token_classifier_head``, ``qa_head``, ``choice_head``, ``discriminator_head``) and ``exported_total``
        (everything in the graph).

    Raises:
        ValueError: the graph has no word-embedding lookup on ``input_ids``.
    """
    graph = model.graph
    sizes = {t.name: math.prod(t.dims) for t in graph.initializer if t.data_type == ONNX_FLOAT and t.dims}
    ids = {"input_ids"}
    for node in graph.node:  # nodes are in topological order
        if node.op_type in _INDEX_STEPS and node.input and node.input[0] in ids:
            ids.update(node.output)
    word = None
    for node in graph.node:
        if node.op_type == "Gather" and len(node.input) > 1 and node.input[1] in ids and node.input[0] in sizes:
            word = node.input[0]
        elif node.op_type == "EmbedLayerNormalization":
            word = node.input[EMBED_LAYER_NORM_WORD_INPUT]
    if word is None or word not in sizes:
        raise ValueError("no word-embedding lookup on input_ids found in the graph")
    outputs = {value.name for value in graph.output}
    heads: dict[str, set[str]] = {}
    for output, (count, start) in HEAD_OUTPUTS.items():
        if output in outputs:
            start = start if start in outputs else "last_hidden_state"
            heads.setdefault(count, set()).update(_weights_between(graph, output, stop=start))
    total = sum(sizes.values())
    head_total = sum(sizes[n] for names in heads.values() for n in names)
    counts = {"bert_model": total - head_total, "token_embeddings": sizes[word]}
    if "pooler_output" in outputs:
        counts["pooler"] = sum(sizes[n] for n in _weights_between(graph, "pooler_output", stop="last_hidden_state"))
    counts.update({count: sum(sizes[n] for n in names) for count, names in heads.items()})
    counts["exported_total"] = total
    return counts


def describe(manifest: Manifest) -> dict[str, Any]:
    """Everything ``bertonnx inspect`` prints, as one JSON-ready dict."""
    directory = manifest.directory
    variants = {}
    for name, record in manifest.variants.items():
        paths = [directory / file for file in manifest.variant_files(name)]
        variants[name] = {
            "file": record["file"],
            "data_file": record.get("data_file"),
            "backend": record.get("backend", VARIANT_BACKENDS.get(name, ONNXRUNTIME_BACKEND)),
            "size_bytes": sum(p.stat().st_size for p in paths) if all(p.is_file() for p in paths) else None,
            "parity": record.get("parity"),
            **({"fusions": record["fusions"]} if "fusions" in record else {}),
        }
    counted_from = next((v for v in COUNTABLE_VARIANTS if v in manifest.variants), None)
    parameters: dict[str, Any] = {"counted_from": None, "counts": dict(manifest.data.get("parameters", {}))}
    model = None
    if counted_from is not None:
        model = read_graph(directory / VARIANT_FILES[counted_from])
        parameters = {"counted_from": f"{VARIANT_FILES[counted_from]} initializers", "counts": count_parameters(model)}
        parameters["matches_manifest"] = parameters["counts"] == manifest.data.get("parameters")
    else:
        parameters["counted_from"] = "manifest (no fp32 graph in this directory)"
    onnx_files = [r["file"] for r in manifest.variants.values() if str(r["file"]).endswith(".onnx")]
    if model is None and onnx_files:
        model = read_graph(directory / onnx_files[0])
    if model is not None:
        initializers = {t.name for t in model.graph.initializer}
        inputs = [{"name": v.name, "shape": _shape(v)} for v in model.graph.input if v.name not in initializers]
        outputs = [{"name": v.name, "shape": _shape(v)} for v in model.graph.output]
        opsets = {o.domain: o.version for o in model.opset_import}
        opset = opsets.get("", manifest.data.get("opset"))
    else:  # only OpenVINO IR in the directory: the manifest recorded the graph's inputs and outputs
        recorded = manifest.data.get("graph", {})
        inputs = [{"name": v["name"], "shape": v["shape"]} for v in recorded.get("inputs", [])]
        outputs = [{"name": v["name"], "shape": v["shape"]} for v in recorded.get("outputs", [])]
        opset = manifest.data.get("opset")
    return {
        "directory": str(directory),
        "source": manifest.data.get("source"),
        "weights": manifest.weights,
        "random_weights": manifest.random_weights,
        "config": manifest.config,
        "parameters": parameters,
        "inputs": inputs,
        "outputs": outputs,
        "opset": opset,
        "variants": variants,
        "refused_variants": {
            name: {"reason": refusal_text(record), "breaches": record.get("breaches", [])}
            for name, record in manifest.refused_variants.items()
        },
        "versions": manifest.data.get("versions"),
        "sentence_transformers": _sentence_facts(manifest),
    }


def _sentence_facts(manifest: Manifest) -> dict[str, Any] | None:
    """The export's sentence-transformers pipeline as ``inspect`` shows it (``None`` for a plain export)."""
    block = manifest.data.get(SENTENCE_BLOCK)
    if not isinstance(block, dict):
        return None
    pipeline = read_pipeline(manifest.data, manifest.directory, lambda name: np.zeros((0, 0), np.float32))
    assert pipeline is not None
    return {
        "model_type": pipeline.model_type,
        "pipeline": pipeline.describe(),
        "similarity_fn_name": pipeline.similarity_fn_name,
        "max_seq_length": pipeline.max_seq_length,
        "prompts": dict(pipeline.prompts),
        "default_prompt_name": pipeline.default_prompt_name,
        "truncate_dim": pipeline.truncate_dim,
        "dimension": pipeline.dimension,
        "activation": manifest.task.get("activation"),
    }


def mean_pooler_cosine(token_states: np.ndarray, tokens: list[str], pooler: np.ndarray) -> float:
    """Cosine between the mean of the non-special token vectors and ``pooler_output``.

    Special tokens are ``[CLS]``, ``[SEP]`` and ``[PAD]``; the module compares the pooled sentence vector
    with this plain average to show the pooler is not just a mean.
    """
    keep = [i for i, token in enumerate(tokens) if token not in ("[CLS]", "[SEP]", "[PAD]")]
    mean = token_states[keep].astype(np.float64).mean(axis=0)
    pooled = pooler.astype(np.float64)
    return float(mean @ pooled / (np.linalg.norm(mean) * np.linalg.norm(pooled)))


def format_figure(name: str, value: float) -> str:
    """A parity figure as people read it: cosines with 5 decimals (0.99960, never a rounded "1"),
    differences with 3 significant digits, agreement as a fraction with 3 decimals."""
    if name.endswith("_min_cosine"):
        return f"{value:.5f}"
    if name.endswith("_agreement"):
        return f"{value:.3f}"
    return f"{value:.3g}"


def source_text(source: dict[str, Any] | str | None) -> str:
    """The manifest's ``source`` in words, e.g. ``bert-base-uncased (hub, revision main)``."""
    if not isinstance(source, dict):
        return str(source)
    details = [str(source["kind"])] if source.get("kind") else []
    if source.get("revision"):
        details.append(f"revision {source['revision']}")
    return f"{source.get('model')}" + (f" ({', '.join(details)})" if details else "")


def weights_text(weights: dict[str, Any]) -> str:
    """The manifest's ``weights`` in words, e.g. ``random (seed 0)`` or ``pretrained; nsp head random (seed 0)``."""
    kind = str(weights.get("kind"))
    seed = weights.get("seed")
    if kind == "random":
        return f"random (seed {seed})"
    heads = weights.get("random_heads") or []
    if heads:
        return f"{kind}; {' and '.join(heads)} head{'s' if len(heads) > 1 else ''} random (seed {seed})"
    return kind
