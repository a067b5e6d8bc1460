"""Build the one ONNX graph: encoder + pooler + NSP head, dynamic batch and sequence axes.

optimum has no task that keeps the pooler and the NSP head, so we give its exporter a custom ONNX config
(BERT's inputs, our three outputs) and a thin module that returns exactly those outputs. We call
``optimum.exporters.onnx.export`` directly: ``onnx_export_from_model`` refuses custom classes.
"""

from __future__ import annotations

from collections import OrderedDict
from pathlib import Path

import onnx
import torch
from optimum.exporters.onnx import export as optimum_export
from optimum.exporters.onnx.model_configs import BertOnnxConfig
from transformers import BertForPreTraining

from bertonnx.manifest import INPUT_NAMES, OUTPUT_NAMES

from .errors import ExportError
from .names import DEFAULT_OPSET

BATCH_AXIS = "batch_size"
SEQUENCE_AXIS = "sequence_length"


class BertWithHeads(torch.nn.Module):
    """``BertForPreTraining`` minus the MLM head: returns the encoder states, pooler and NSP logits."""

    def __init__(self, model: BertForPreTraining) -> None:
        super().__init__()
        self.bert = model.bert
        self.seq_relationship = model.cls.seq_relationship
        self.config = model.config

    def forward(
        self, input_ids: torch.Tensor, attention_mask: torch.Tensor, token_type_ids: torch.Tensor
    ) -> dict[str, torch.Tensor]:
        out = self.bert(
            input_ids=input_ids, attention_mask=attention_mask, token_type_ids=token_type_ids, return_dict=True
        )
        return {
            "last_hidden_state": out.last_hidden_state,
            "pooler_output": out.pooler_output,
            "nsp_logits": self.seq_relationship(out.pooler_output),
        }


class BertWithHeadsOnnxConfig(BertOnnxConfig):
    """BERT's inputs (ids, mask, type ids) with our three outputs and their dynamic axes."""

    @property
    def inputs(self) -> dict[str, dict[int, str]]:
        return OrderedDict((name, {0: BATCH_AXIS, 1: SEQUENCE_AXIS}) for name in INPUT_NAMES)

    @property
    def outputs(self) -> dict[str, dict[int, str]]:
        return OrderedDict(
            [
                ("last_hidden_state", {0: BATCH_AXIS, 1: SEQUENCE_AXIS}),
                ("pooler_output", {0: BATCH_AXIS}),
                ("nsp_logits", {0: BATCH_AXIS}),
            ]
        )


def export_graph(model: BertForPreTraining, path: Path, opset: int = DEFAULT_OPSET) -> None:
    """Export ``model`` to ``path`` with optimum's exporter and run onnx's full checker on the result.

    Raises:
        ExportError: the graph's inputs or outputs are not the expected ones, or the checker rejects it.
    """
    config = BertWithHeadsOnnxConfig(model.config, task="feature-extraction")
    inputs, outputs = optimum_export(BertWithHeads(model).eval(), config, path, opset=opset)
    if tuple(inputs) != INPUT_NAMES or tuple(outputs) != OUTPUT_NAMES:
        raise ExportError(
            f"exported graph has inputs {inputs} and outputs {outputs}, expected {INPUT_NAMES} and {OUTPUT_NAMES}"
        )
    try:
        onnx.checker.check_model(str(path), full_check=True)
    except onnx.checker.ValidationError as exc:
        raise ExportError(f"onnx.checker rejected the exported graph: {exc}") from None


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
