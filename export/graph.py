"""Build the export's ONNX graphs: the encoder with the checkpoint's heads, and the MLM head on its own.

optimum has no task that keeps the pooler beside a head, so we give its exporter a custom ONNX config
(the family's optimum config with its inputs, and the row's outputs from :mod:`export.heads`) and a
thin module that calls the transformers class's own forward and returns exactly those outputs. We call
``optimum.exporters.onnx.export`` directly: ``onnx_export_from_model`` refuses custom classes.

The masked-language-model head is a second graph, ``hidden_states`` [n, hidden] -> ``mlm_logits`` [n, vocab]:
the runtime gathers the hidden states at the ``[MASK]`` positions and projects only those onto the
vocabulary, so fill-mask costs one projection per mask and the other tasks never pay for it.
"""

from __future__ import annotations

import contextlib
import sys
from collections import OrderedDict
from collections.abc import Iterator
from functools import reduce
from pathlib import Path

import onnx
import torch
from optimum.exporters.onnx import OnnxConfig, model_configs
from optimum.exporters.onnx import export as optimum_export
from transformers import PreTrainedModel

from bertonnx.manifest import MLM_HEAD_INPUT, MLM_HEAD_OUTPUT

from .errors import ExportError
from .heads import ARCHITECTURES, HeadRow
from .names import DEFAULT_OPSET

BATCH_AXIS = "batch_size"
SEQUENCE_AXIS = "sequence_length"
MASKS_AXIS = "masks"
#: Axes of each main-graph output (all float32).
OUTPUT_AXES: dict[str, dict[int, str]] = {
    "last_hidden_state": {0: BATCH_AXIS, 1: SEQUENCE_AXIS},
    "pooler_output": {0: BATCH_AXIS},
    "nsp_logits": {0: BATCH_AXIS},
    "logits": {0: BATCH_AXIS},
    "token_logits": {0: BATCH_AXIS, 1: SEQUENCE_AXIS},
    "start_logits": {0: BATCH_AXIS, 1: SEQUENCE_AXIS},
    "end_logits": {0: BATCH_AXIS, 1: SEQUENCE_AXIS},
    "choice_logits": {0: BATCH_AXIS},
    "rtd_logits": {0: BATCH_AXIS, 1: SEQUENCE_AXIS},
}


def row_of(model: PreTrainedModel) -> HeadRow:
    """The :mod:`export.heads` row of a transformers model, by its class.

    Raises:
        ExportError: the class is not one bertonnx exports.
    """
    name = type(model).__name__
    if name not in ARCHITECTURES:
        raise ExportError(f"{name} is not an architecture bertonnx exports ({', '.join(ARCHITECTURES)})")
    return ARCHITECTURES[name]


def run_class(model: PreTrainedModel, feeds: dict[str, torch.Tensor]) -> dict[str, torch.Tensor]:
    """Run a transformers class's own forward (``output_hidden_states=True``) and return its outputs under the
    graph's names, plus ``mlm_logits`` over every token when the class has an MLM head.

    ``pooler_output`` is what the class's own pooler gave in that forward (caught by a hook, so in a graph the
    head reads the very pooler output the graph returns; only ``<prefix>Model`` returns it itself). A
    multiple-choice class takes ``[1, choices, t]`` and its logits are flattened to one per choice.
    """
    row = row_of(model)
    pooled: list[torch.Tensor] = []
    states: list[torch.Tensor] = []
    hooks = []
    if row.kind.name != "Model":  # the base model's own last_hidden_state (ModernBERT's is after its final norm)
        base = getattr(model, row.family.base)
        hooks.append(base.register_forward_hook(lambda _module, _args, output: states.append(output[0])))
        if "pooler_output" in row.outputs:
            hooks.append(base.pooler.register_forward_hook(lambda _module, _args, output: pooled.append(output)))
    try:
        out = model(**feeds, output_hidden_states=True, return_dict=True)
    finally:
        for hook in hooks:
            hook.remove()
    if row.kind.name == "Model":
        found: dict[str, torch.Tensor] = {"last_hidden_state": out.last_hidden_state}
        if "pooler_output" in row.outputs:
            found["pooler_output"] = out.pooler_output
        return found
    found = {"last_hidden_state": states[-1]}
    if pooled:
        found["pooler_output"] = pooled[-1]
    if "nsp_logits" in row.outputs:
        nsp = getattr(out, "seq_relationship_logits", None)
        found["nsp_logits"] = out.logits if nsp is None else nsp
    for name in ("logits", "token_logits", "rtd_logits"):
        if name in row.outputs:
            found[name] = out.logits
    if "start_logits" in row.outputs:
        found["start_logits"], found["end_logits"] = out.start_logits, out.end_logits
    if "choice_logits" in row.outputs:  # the rows are the choices of one question
        found["choice_logits"] = out.logits.reshape(-1)
    if row.has_mlm:
        prediction = getattr(out, "prediction_logits", None)
        found[MLM_HEAD_OUTPUT] = out.logits if prediction is None else prediction
    return found


class WithHeads(torch.nn.Module):
    """A transformers model as the main graph computes it: its own forward, returning the encoder states and
    the row's outputs (:func:`run_class`).

    ``BertForPreTraining`` gives ``last_hidden_state``, ``pooler_output`` and ``nsp_logits`` (its MLM head is
    :class:`MlmHead`, a second graph: the tracer drops the class's own MLM logits, which no output uses);
    ``BertForSequenceClassification`` gives ``logits`` beside the first two, and so on
    (:data:`export.heads.ROWS`). Families without segments take no ``token_type_ids``.
    """

    def __init__(self, model: PreTrainedModel) -> None:
        super().__init__()
        self.row = row_of(model)
        self.model = model
        self.config = model.config

    def forward(
        self, input_ids: torch.Tensor, attention_mask: torch.Tensor, token_type_ids: torch.Tensor | None = None
    ) -> dict[str, torch.Tensor]:
        feeds = {"input_ids": input_ids, "attention_mask": attention_mask}
        if token_type_ids is not None:
            feeds["token_type_ids"] = token_type_ids
        if "choice_logits" in self.row.outputs:  # [choices, t] -> one question with those choices
            feeds = {k: v[None] for k, v in feeds.items()}
        found = run_class(self.model, feeds)  # a choice class's states are already [choices, t, hidden]
        return {name: found[name] for name in self.row.outputs}


#: The name the heads tests and older callers use.
BertWithHeads = WithHeads


def _module(model: torch.nn.Module, path: str) -> torch.nn.Module:
    found: torch.nn.Module = reduce(getattr, path.split("."), model)
    return found


class MlmHead(torch.nn.Module):
    """The MLM head alone: the family's head modules in order (BERT's ``cls.predictions``: transform, then the
    decoder with its bias; RoBERTa's ``lm_head``; DistilBERT's transform, activation, LayerNorm, projector)."""

    def __init__(self, model: PreTrainedModel) -> None:
        super().__init__()
        self.parts = torch.nn.ModuleList(_module(model, path) for path in row_of(model).family.modules("mlm"))

    def forward(self, hidden_states: torch.Tensor) -> torch.Tensor:
        for part in self.parts:
            hidden_states = part(hidden_states)
        return hidden_states


def graph_inputs(model: PreTrainedModel) -> tuple[str, ...]:
    """The main graph's inputs for ``model``: its family's, with ``token_type_ids`` where the family takes them
    only from a config that embeds segments (DeBERTa with ``type_vocab_size > 0``)."""
    return row_of(model).family.graph_inputs(getattr(model.config, "type_vocab_size", None))


def _heads_onnx_config(row: HeadRow, inputs: tuple[str, ...]) -> type[OnnxConfig]:
    family_config: type[OnnxConfig] = getattr(model_configs, row.family.onnx_config)
    outputs = row.outputs

    class HeadsOnnxConfig(family_config):  # type: ignore[valid-type,misc]
        """The family's inputs with the row's outputs and their dynamic axes."""

        @property
        def inputs(self) -> dict[str, dict[int, str]]:
            return OrderedDict((name, {0: BATCH_AXIS, 1: SEQUENCE_AXIS}) for name in inputs)

        @property
        def outputs(self) -> dict[str, dict[int, str]]:
            return OrderedDict((name, OUTPUT_AXES[name]) for name in outputs)

    return HeadsOnnxConfig


def _check(path: Path, what: str) -> None:
    try:
        onnx.checker.check_model(str(path), full_check=True)
    except onnx.checker.ValidationError as exc:
        raise ExportError(f"onnx.checker rejected the exported {what}: {exc}") from None


@contextlib.contextmanager
def _traced_as_python(model: PreTrainedModel) -> Iterator[None]:
    """Swap a family's ``torch.jit``-scripted helpers for Python ones while the graph is traced.

    DeBERTa-v2's ``build_rpos`` is scripted, so the tracer records its test (are the keys as long as the
    queries?) as an ONNX ``If`` whose branches have no static rank; OpenVINO's CPU plugin refuses such an ``If``
    (the ``bf16`` variant could not even be compiled). In the classes exported the keys are the queries' own
    tokens, so the test is always false: traced as Python, the graph keeps the relative positions it was given.
    """
    module = sys.modules[type(model).__module__]
    scripted = getattr(module, "build_rpos", None) if row_of(model).family.model_type == "deberta-v2" else None
    if scripted is None:
        yield
        return

    def build_rpos(
        query_layer: torch.Tensor,
        key_layer: torch.Tensor,
        relative_pos: torch.Tensor,
        position_buckets: int,
        max_relative_positions: int,
    ) -> torch.Tensor:
        if key_layer.size(-2) != query_layer.size(-2):
            found: torch.Tensor = module.build_relative_position(
                key_layer, key_layer, bucket_size=position_buckets, max_position=max_relative_positions
            )
            return found
        return relative_pos

    module.build_rpos = build_rpos
    try:
        yield
    finally:
        module.build_rpos = scripted


def _traced_as(model: PreTrainedModel) -> contextlib.AbstractContextManager[None]:
    """What a family's graph needs while it is traced: ModernBERT's attention without ``t × t`` masks and with
    banded local layers (:mod:`export.modernbert`); nothing for the others."""
    if model.config.model_type == "modernbert":
        from .modernbert import banded_attention

        return banded_attention(model)
    return contextlib.nullcontext()


def export_graph(model: PreTrainedModel, path: Path, opset: int = DEFAULT_OPSET) -> None:
    """Export ``model``'s main graph (encoder + the row's heads) to ``path`` with optimum's exporter and run
    onnx's full checker on the result.

    Raises:
        ExportError: the graph's inputs or outputs are not the expected ones, or the checker rejects it.
    """
    module = WithHeads(model).eval()
    expected = module.row.outputs
    wanted = graph_inputs(model)
    config = _heads_onnx_config(module.row, wanted)(model.config, task="feature-extraction")
    with _traced_as(model), _traced_as_python(model):
        inputs, outputs = optimum_export(module, config, path, opset=opset)
    if tuple(inputs) != wanted or tuple(outputs) != expected:
        raise ExportError(f"exported graph has inputs {inputs} and outputs {outputs}, expected {wanted} and {expected}")
    _check(path, "graph")


def export_mlm_head(model: PreTrainedModel, path: Path, opset: int = DEFAULT_OPSET) -> int:
    """Export ``model``'s MLM head (``hidden_states`` [n, hidden] -> ``mlm_logits`` [n, vocab]) to ``path``.

    Returns:
        Its parameter count without the decoder matrix, which is the word-embedding table (tied) in BERT
        checkpoints; with it when the checkpoint unties them.

    Raises:
        ExportError: the model has no MLM head, or onnx's checker rejects the graph.
    """
    if not row_of(model).has_mlm:
        raise ExportError(f"{type(model).__name__} has no MLM head to export")
    head = MlmHead(model).eval()
    sample = torch.zeros(2, model.config.hidden_size, dtype=torch.float32)
    with torch.no_grad():
        torch.onnx.export(
            head,
            (sample,),
            str(path),
            input_names=[MLM_HEAD_INPUT],
            output_names=[MLM_HEAD_OUTPUT],
            dynamic_axes={MLM_HEAD_INPUT: {0: MASKS_AXIS}, MLM_HEAD_OUTPUT: {0: MASKS_AXIS}},
            opset_version=opset,
            dynamo=False,
        )
    _check(path, "MLM head")
    words = model.get_input_embeddings().weight
    return sum(p.numel() for p in head.parameters() if p is not words)


def describe_io(path: Path) -> dict[str, list[dict[str, object]]]:
    """The graph's inputs and outputs: name, element type and shape (axis names for dynamic axes)."""
    model = onnx.load(str(path), load_external_data=False)
    initializers = {init.name for init in model.graph.initializer}

    def describe(value: onnx.ValueInfoProto) -> dict[str, object]:
        tensor = value.type.tensor_type
        shape = [dim.dim_param or dim.dim_value for dim in tensor.shape.dim]
        return {
            "name": value.name,
            "dtype": onnx.helper.tensor_dtype_to_np_dtype(tensor.elem_type).name,
            "shape": shape,
        }

    return {
        "inputs": [describe(v) for v in model.graph.input if v.name not in initializers],
        "outputs": [describe(v) for v in model.graph.output],
    }
