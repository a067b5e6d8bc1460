"""Build the export's ONNX graphs: the encoder with the checkpoint's heads, and the MLM head on its own.

optimum has no task that keeps the pooler beside a head, so we give its exporter a custom ONNX config
(BERT's inputs, the row's outputs from :mod:`export.heads`) and a thin module that returns exactly those
outputs. We call ``optimum.exporters.onnx.export`` directly: ``onnx_export_from_model`` refuses custom
classes.

The masked-language-model head is a second graph, ``hidden_states`` [n, hidden] -> ``mlm_logits`` [n, vocab]:
the runtime gathers the hidden states at the ``[MASK]`` positions and projects only those onto the
vocabulary, so fill-mask costs one projection per mask and the other tasks never pay for it.
"""

from __future__ import annotations

from collections import OrderedDict
from pathlib import Path

import onnx
import torch
from optimum.exporters.onnx import export as optimum_export
from optimum.exporters.onnx.model_configs import BertOnnxConfig
from transformers import PreTrainedModel

from bertonnx.manifest import INPUT_NAMES, MLM_HEAD_INPUT, MLM_HEAD_OUTPUT

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


class BertWithHeads(torch.nn.Module):
    """A transformers BERT model as the main graph computes it: the encoder states and the row's outputs.

    ``BertForPreTraining`` gives ``last_hidden_state``, ``pooler_output`` and ``nsp_logits`` (its MLM head is
    :class:`MlmHead`); ``BertForSequenceClassification`` gives ``logits`` beside the first two, and so on
    (:data:`export.heads.ROWS`).
    """

    def __init__(self, model: PreTrainedModel) -> None:
        super().__init__()
        self.row = row_of(model)
        self.model = model
        self.config = model.config

    def forward(
        self, input_ids: torch.Tensor, attention_mask: torch.Tensor, token_type_ids: torch.Tensor
    ) -> dict[str, torch.Tensor]:
        model = self.model
        base = model if self.row.architecture == "BertModel" else model.bert
        out = base(input_ids=input_ids, attention_mask=attention_mask, token_type_ids=token_type_ids, return_dict=True)
        hidden = out.last_hidden_state
        result = {"last_hidden_state": hidden}
        if "pooler_output" in self.row.outputs:
            result["pooler_output"] = out.pooler_output
        if "nsp_logits" in self.row.outputs:
            result["nsp_logits"] = model.cls.seq_relationship(out.pooler_output)
        if "logits" in self.row.outputs:
            result["logits"] = model.classifier(out.pooler_output)  # dropout is the identity in eval mode
        if "token_logits" in self.row.outputs:
            result["token_logits"] = model.classifier(hidden)
        if "choice_logits" in self.row.outputs:  # one (context, choice) pair per row: its one logit
            result["choice_logits"] = model.classifier(out.pooler_output).squeeze(-1)
        if "start_logits" in self.row.outputs:
            start, end = model.qa_outputs(hidden).split(1, dim=-1)
            result["start_logits"] = start.squeeze(-1)
            result["end_logits"] = end.squeeze(-1)
        return {name: result[name] for name in self.row.outputs}


class MlmHead(torch.nn.Module):
    """The MLM head alone: transform (dense, activation, LayerNorm), then the decoder with its bias."""

    def __init__(self, model: PreTrainedModel) -> None:
        super().__init__()
        self.predictions = model.cls.predictions

    def forward(self, hidden_states: torch.Tensor) -> torch.Tensor:
        logits: torch.Tensor = self.predictions(hidden_states)
        return logits


def _heads_onnx_config(outputs: tuple[str, ...]) -> type[BertOnnxConfig]:
    class HeadsOnnxConfig(BertOnnxConfig):
        """BERT's inputs (ids, mask, type ids) with the row's outputs and their dynamic axes."""

        @property
        def inputs(self) -> dict[str, dict[int, str]]:
            return OrderedDict((name, {0: BATCH_AXIS, 1: SEQUENCE_AXIS}) for name in INPUT_NAMES)

        @property
        def outputs(self) -> dict[str, dict[int, str]]:
            return OrderedDict((name, OUTPUT_AXES[name]) for name in outputs)

    return HeadsOnnxConfig


def _check(path: Path, what: str) -> None:
    try:
        onnx.checker.check_model(str(path), full_check=True)
    except onnx.checker.ValidationError as exc:
        raise ExportError(f"onnx.checker rejected the exported {what}: {exc}") from None


def export_graph(model: PreTrainedModel, path: Path, opset: int = DEFAULT_OPSET) -> None:
    """Export ``model``'s main graph (encoder + the row's heads) to ``path`` with optimum's exporter and run
    onnx's full checker on the result.

    Raises:
        ExportError: the graph's inputs or outputs are not the expected ones, or the checker rejects it.
    """
    module = BertWithHeads(model).eval()
    expected = module.row.outputs
    config = _heads_onnx_config(expected)(model.config, task="feature-extraction")
    inputs, outputs = optimum_export(module, config, path, opset=opset)
    if tuple(inputs) != INPUT_NAMES or tuple(outputs) != expected:
        raise ExportError(
            f"exported graph has inputs {inputs} and outputs {outputs}, expected {INPUT_NAMES} and {expected}"
        )
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
