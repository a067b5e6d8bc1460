"""The model table: the one place a graph output, a head, an architecture, a family and a task are described.

The export reads it to decide what to export and writes its answers into the manifest; the runtime, ``inspect``,
``/info``, KServe's model metadata, the errors, the command line and the corpus job read them back from here.
Adding a head is one :class:`Head` and one :class:`Architecture` row plus one task module; adding a family is
one :class:`Family` row plus what its graph genuinely needs (a fusion or int8 hook in the export).

Four tables, all plain data (no torch, no onnxruntime):

- :data:`OUTPUTS`: every graph output an export may give, its axes (``batch``, ``tokens``, ``hidden``,
  ``labels``, or a fixed size) and whether it has a value per token (then each input's row is cut to its own
  tokens, so an answer never depends on the padding of the batch it ran in);
- :data:`HEADS`: every head beside the encoder, the outputs it adds and the tasks it serves;
- :data:`ARCHITECTURES`: each transformers class kind by its suffix (``ForSequenceClassification`` ...), the
  heads it carries, its graph outputs in order and the ``--task`` name that picks it;
- :data:`FAMILIES`: each encoder family by ``config.model_type``: its class prefix, graph inputs, pooler, the
  architectures transformers has for it, its base-model attribute, optimum ONNX config, position offset,
  fusion recipe and where its heads' modules sit;

and :data:`TASKS`, every runtime task with the head it needs (:mod:`bertonnx.tasks` holds their steps).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field

__all__ = [
    "ARCHITECTURES",
    "FAMILIES",
    "HEADS",
    "OUTPUTS",
    "TASKS",
    "Architecture",
    "Family",
    "Head",
    "Output",
    "TaskRow",
    "architecture_of",
    "family_of",
    "output_shape",
]


@dataclass(frozen=True)
class Output:
    """One graph output (all float32).

    Attributes:
        name: the output's name in every export's graph.
        axes: each axis: ``batch``, ``tokens``, ``hidden``, ``labels`` (the head's labels), or a fixed size.
        per_token: it has a value per token (its first two axes are batch and tokens).
        description: what it holds.
    """

    name: str
    axes: tuple[str | int, ...]
    per_token: bool
    description: str


OUTPUTS: Mapping[str, Output] = {
    output.name: output
    for output in (
        Output("last_hidden_state", ("batch", "tokens", "hidden"), True, "the encoder's last layer, per token"),
        Output("pooler_output", ("batch", "hidden"), False, "the trained pooler (tanh dense) on the first token"),
        Output("nsp_logits", ("batch", 2), False, "next-sentence prediction logits; index 0 is 'B follows A'"),
        Output("logits", ("batch", "labels"), False, "sequence-classification logits, in id2label order"),
        Output("token_logits", ("batch", "tokens", "labels"), True, "token-classification logits per token"),
        Output("start_logits", ("batch", "tokens"), True, "question answering: answer-start logit per token"),
        Output("end_logits", ("batch", "tokens"), True, "question answering: answer-end logit per token"),
        Output("choice_logits", ("batch",), False, "multiple choice: one logit per (context, choice) pair"),
        Output("rtd_logits", ("batch", "tokens"), True, "replaced-token detection: logit per token, 'replaced'"),
    )
}


def output_shape(name: str, *, hidden_size: int, num_labels: int | None) -> list[int]:
    """An output's shape with ``-1`` for every dynamic axis (KServe's model metadata, ``inspect``).

    Raises:
        KeyError: ``name`` is not in :data:`OUTPUTS`.
    """
    sizes = {"batch": -1, "tokens": -1, "hidden": hidden_size, "labels": -1 if num_labels is None else num_labels}
    return [axis if isinstance(axis, int) else sizes[axis] for axis in OUTPUTS[name].axes]


@dataclass(frozen=True)
class Head:
    """A head beside the encoder.

    Attributes:
        name: ``pooler``, ``nsp``, ``mlm``, ``classifier``, ``token_classifier``, ``qa``, ``choice`` or
            ``discriminator`` (ELECTRA's replaced-token detector).
        outputs: the main-graph outputs it adds (the MLM head is a second graph, run on ``[MASK]`` states only).
        what: how errors name it ("NSP head").
    """

    name: str
    outputs: tuple[str, ...]
    what: str


HEADS: Mapping[str, Head] = {
    head.name: head
    for head in (
        Head("pooler", ("pooler_output",), "pooler"),
        Head("nsp", ("nsp_logits",), "NSP head"),
        Head("mlm", (), "MLM head"),
        Head("classifier", ("logits",), "classification head"),
        Head("token_classifier", ("token_logits",), "token-classification head"),
        Head("qa", ("start_logits", "end_logits"), "question-answering head"),
        Head("choice", ("choice_logits",), "multiple-choice head"),
        Head("discriminator", ("rtd_logits",), "replaced-token-detection head"),
    )
}


@dataclass(frozen=True)
class Architecture:
    """A transformers class kind, by the suffix after its family's prefix (``Bert`` + ``ForMaskedLM``).

    Attributes:
        suffix: ``Model``, ``ForPreTraining``, ``ForSequenceClassification`` ...
        key: its key in :data:`ARCHITECTURES` when another kind has the same suffix (ELECTRA's
            ``ForPreTraining`` is a replaced-token discriminator, not BERT's NSP + MLM pre-training); else the
            suffix.
        task_name: the export's ``--task`` name (the pipeline's task name where transformers has one).
        heads: heads beside the encoder (keys of :data:`HEADS`); ``pooler`` only where the family has one.
        tasks: runtime tasks an export of it offers (``rerank`` is added for a one-label classifier).
        labelled: it carries ``num_labels`` / ``id2label``.
    """

    suffix: str
    task_name: str
    heads: tuple[str, ...]
    tasks: tuple[str, ...]
    labelled: bool = False
    key: str = ""

    @property
    def name(self) -> str:
        """Its key in :data:`ARCHITECTURES` (the suffix unless :attr:`key` is set)."""
        return self.key or self.suffix

    def outputs(self, *, pooler: bool = True) -> tuple[str, ...]:
        """The main graph's outputs in order: ``last_hidden_state``, then each head's (the pooler's only
        when ``pooler``: the family has one)."""
        names = ["last_hidden_state"]
        for head in self.heads:
            if head != "pooler" or pooler:
                names += HEADS[head].outputs
        return tuple(names)

    def runtime_tasks(self, num_labels: int | None) -> list[str]:
        """The tasks of an export of this kind; a one-label classifier is also a reranker."""
        tasks = list(self.tasks)
        if "classify" in tasks and num_labels == 1:
            tasks.append("rerank")
        return tasks


ARCHITECTURES: Mapping[str, Architecture] = {
    row.name: row
    for row in (
        Architecture("Model", "feature-extraction", ("pooler",), ("embed",)),
        Architecture("ForPreTraining", "pretraining", ("pooler", "nsp", "mlm"), ("embed", "nsp", "fill_mask")),
        Architecture("ForMaskedLM", "fill-mask", ("mlm",), ("embed", "fill_mask")),
        Architecture("ForNextSentencePrediction", "next-sentence-prediction", ("pooler", "nsp"), ("embed", "nsp")),
        Architecture(
            "ForSequenceClassification", "text-classification", ("pooler", "classifier"), ("embed", "classify"), True
        ),
        Architecture("ForTokenClassification", "token-classification", ("token_classifier",), ("embed", "tag"), True),
        Architecture("ForQuestionAnswering", "question-answering", ("qa",), ("embed", "answer")),
        Architecture("ForMultipleChoice", "multiple-choice", ("pooler", "choice"), ("embed", "choose")),
        Architecture(
            "ForPreTraining",
            "replaced-token-detection",
            ("discriminator",),
            ("embed", "detect_replaced"),
            key="Discriminator",
        ),
    )
}


#: Where each head's modules sit in a class, outside the base model (BERT's names; a family overrides those that
#: differ). Parameter names start with these paths; the MLM head graph applies its modules in order.
BERT_HEAD_MODULES: Mapping[str, tuple[str, ...]] = {
    "nsp": ("cls.seq_relationship",),
    "mlm": ("cls.predictions",),
    "classifier": ("classifier",),
    "token_classifier": ("classifier",),
    "qa": ("qa_outputs",),
    "choice": ("classifier",),
}
#: Suffixes every family beyond BERT has in transformers (no NSP, no BERT-style pre-training).
ENCODER_ARCHITECTURES = (
    "Model",
    "ForMaskedLM",
    "ForSequenceClassification",
    "ForTokenClassification",
    "ForQuestionAnswering",
    "ForMultipleChoice",
)


@dataclass(frozen=True)
class Family:
    """An encoder family, by ``config.model_type``.

    Attributes:
        model_type: ``config.model_type`` (``bert``).
        prefix: its transformers class prefix (``Bert``).
        inputs: the graph's inputs, in order (no ``token_type_ids`` where the family has no segments).
        pooler: its base model has a trained pooler.
        architectures: keys of :data:`ARCHITECTURES` transformers has for it.
        base: the attribute holding the base model in every class but ``<prefix>Model`` (``bert``, ``roberta``).
        onnx_config: optimum's ONNX config class for the family (``BertOnnxConfig``): its dummy inputs and
            normalized config names.
        no_pooler: architecture keys whose class in this family has no pooler although BERT's has one
            (``RobertaForSequenceClassification`` classifies with its own dense + tanh head).
        position_offset: position ids before the first token's (RoBERTa counts from ``padding_idx + 1`` = 2,
            so 514 position embeddings take 512 tokens).
        fusion: onnxruntime's transformer optimizer ``model_type`` for the ``optimized`` variant, or ``None``
            when its fusions do not understand the family's graph (then :attr:`no_fusion` says why).
        no_fusion: why the ``optimized`` variant cannot be built, when :attr:`fusion` is ``None``.
        head_modules: head name -> module paths in the class where they differ from
            :data:`BERT_HEAD_MODULES` (the MLM head's modules run in this order).
        typed_segments: the graph also takes ``token_type_ids`` when the checkpoint's config embeds segments
            (``type_vocab_size > 0``; DeBERTa-v2 and v3 checkpoints have 0, so :attr:`inputs` lacks them).
    """

    model_type: str
    prefix: str
    inputs: tuple[str, ...]
    pooler: bool
    architectures: tuple[str, ...]
    base: str = "bert"
    onnx_config: str = "BertOnnxConfig"
    no_pooler: tuple[str, ...] = ()
    position_offset: int = 0
    fusion: str | None = "bert"
    no_fusion: str = ""
    head_modules: Mapping[str, tuple[str, ...]] = field(default_factory=dict)
    typed_segments: bool = False

    def graph_inputs(self, type_vocab_size: int | None) -> tuple[str, ...]:
        """The graph's inputs for a checkpoint with ``type_vocab_size`` segment embeddings: :attr:`inputs`,
        plus ``token_type_ids`` where :attr:`typed_segments` and the config embeds segments."""
        if self.typed_segments and type_vocab_size and "token_type_ids" not in self.inputs:
            return (*self.inputs, "token_type_ids")
        return self.inputs

    def class_name(self, key: str) -> str:
        """The transformers class of an architecture kind in this family (``Bert`` + ``ForMaskedLM``)."""
        return self.prefix + ARCHITECTURES[key].suffix

    def has_pooler(self, key: str) -> bool:
        """Whether this family's class of architecture ``key`` has a pooler (and the kind uses one)."""
        return self.pooler and "pooler" in ARCHITECTURES[key].heads and key not in self.no_pooler

    def modules(self, head: str) -> tuple[str, ...]:
        """Module paths of ``head`` in this family's classes (outside the base model)."""
        return tuple(self.head_modules.get(head, BERT_HEAD_MODULES.get(head, ())))

    def usable_positions(self, max_position_embeddings: int) -> int:
        """Tokens an input may have: the position embeddings less :attr:`position_offset`."""
        return max_position_embeddings - self.position_offset


#: Why ModernBERT has no ``optimized`` variant (onnxruntime 1.32's optimizer on a ModernBERT graph: 0 Attention,
#: only LayerNorm and GELU).
MODERNBERT_NO_FUSION = (
    "onnxruntime's BERT optimizer fuses none of ModernBERT's attention layers (rotary positions on the packed QKV "
    "and the sliding-window mask are a pattern its Attention fusion does not match; it fuses only LayerNorm and "
    "GELU); use fp32 or int8"
)
_NO_SEGMENTS = ("input_ids", "attention_mask")
_SEGMENTS = ("input_ids", "attention_mask", "token_type_ids")
FAMILIES: Mapping[str, Family] = {
    family.model_type: family
    for family in (
        Family("bert", "Bert", _SEGMENTS, True, tuple(k for k in ARCHITECTURES if k != "Discriminator")),
        Family(
            "roberta",
            "Roberta",
            _NO_SEGMENTS,
            True,
            ENCODER_ARCHITECTURES,
            base="roberta",
            onnx_config="RobertaOnnxConfig",
            no_pooler=("ForSequenceClassification",),
            position_offset=2,
            head_modules={"mlm": ("lm_head",)},
        ),
        Family(
            "xlm-roberta",
            "XLMRoberta",
            _NO_SEGMENTS,
            True,
            ENCODER_ARCHITECTURES,
            base="roberta",
            onnx_config="XLMRobertaOnnxConfig",
            no_pooler=("ForSequenceClassification",),
            position_offset=2,
            head_modules={"mlm": ("lm_head",)},
        ),
        Family(
            "distilbert",
            "DistilBert",
            _NO_SEGMENTS,
            False,
            ENCODER_ARCHITECTURES,
            base="distilbert",
            onnx_config="DistilBertOnnxConfig",
            head_modules={
                "mlm": ("vocab_transform", "activation", "vocab_layer_norm", "vocab_projector"),
                "classifier": ("pre_classifier", "classifier"),
                "choice": ("pre_classifier", "classifier"),
            },
        ),
        Family(
            "mpnet",
            "MPNet",
            _NO_SEGMENTS,
            True,
            ENCODER_ARCHITECTURES,
            base="mpnet",
            onnx_config="MPNetOnnxConfig",
            no_pooler=("ForSequenceClassification",),
            position_offset=2,
            fusion=None,
            no_fusion="onnxruntime's BERT optimizer fuses none of MPNet's attention layers (their relative position "
            "bias is added to the scores, a pattern its Attention fusion does not match); use fp32 or int8",
            head_modules={"mlm": ("lm_head",)},
        ),
        Family(
            "electra",
            "Electra",
            _SEGMENTS,
            False,
            (*ENCODER_ARCHITECTURES, "Discriminator"),
            base="electra",
            onnx_config="ElectraOnnxConfig",
            head_modules={
                "mlm": ("generator_predictions", "generator_lm_head"),
                "choice": ("sequence_summary", "classifier"),
                "discriminator": ("discriminator_predictions",),
            },
        ),
        Family(  # DeBERTa-v2 and v3 (v3 checkpoints say model_type deberta-v2)
            "deberta-v2",
            "DebertaV2",
            _NO_SEGMENTS,
            False,
            ENCODER_ARCHITECTURES,
            base="deberta",
            onnx_config="DebertaV2OnnxConfig",
            typed_segments=True,
            fusion=None,
            no_fusion="onnxruntime's BERT optimizer fuses none of DeBERTa's attention layers (their "
            "content-to-position and position-to-content scores, gathered by relative position, are a pattern its "
            "Attention fusion does not match; it has no DeBERTa fusion); use fp32 or int8",
            head_modules={"classifier": ("pooler", "classifier"), "choice": ("pooler", "classifier")},
        ),
        Family(
            "modernbert",
            "ModernBert",
            _NO_SEGMENTS,
            False,
            ENCODER_ARCHITECTURES,
            base="model",
            onnx_config="ModernBertOnnxConfig",
            fusion=None,
            no_fusion=MODERNBERT_NO_FUSION,
            head_modules={
                "mlm": ("head", "decoder"),
                **{head: ("head", "classifier") for head in ("classifier", "token_classifier", "qa", "choice")},
            },
        ),
    )
}


def family_of(model_type: str) -> Family:
    """The :data:`FAMILIES` row of ``model_type``.

    Raises:
        ValueError: an unknown family; the message lists the known ones.
    """
    try:
        return FAMILIES[model_type]
    except KeyError:
        raise ValueError(
            f"model_type {model_type!r} is not a family bertonnx runs; expected one of {', '.join(FAMILIES)}"
        ) from None


def architecture_of(class_name: str, families: Sequence[Family] | None = None) -> tuple[Family, Architecture]:
    """The family and architecture kind of a transformers class name (``BertForMaskedLM``).

    Raises:
        ValueError: the name is no class of a known family.
    """
    for family in families if families is not None else FAMILIES.values():
        for key in family.architectures:
            if family.class_name(key) == class_name:
                return family, ARCHITECTURES[key]
    known = ", ".join(f.class_name(s) for f in FAMILIES.values() for s in f.architectures)
    raise ValueError(f"{class_name} is not a class bertonnx exports; expected one of {known}")


@dataclass(frozen=True)
class TaskRow:
    """A runtime task (its steps: :mod:`bertonnx.tasks`).

    Attributes:
        name: ``embed``, ``nsp``, ``classify``, ``rerank``, ``fill_mask``, ``tag``, ``answer``, ``choose``,
            ``detect_replaced`` or ``encode``.
        head: the head it needs (a key of :data:`HEADS`), or ``None`` (every export).
        what: how :class:`~bertonnx.errors.HeadMissingError` names what is missing.
        checkpoints: keys of :data:`ARCHITECTURES` that have the head, for the error's fix.
        condition: what else the checkpoint needs, for the error's fix (``with num_labels=1 ...``).
        summary: one line for help texts.
    """

    name: str
    head: str | None
    what: str
    checkpoints: tuple[str, ...]
    condition: str
    summary: str

    def fix(self, prefix: str) -> str:
        """The checkpoint to export for this task, in a family with class ``prefix`` (``Bert``); a family
        without such a class (RoBERTa has no NSP head) is told so and pointed at the first family with one
        (BERT's NSP head, ELECTRA's discriminator)."""
        if not self.checkpoints:
            return self.condition
        family = next((f for f in FAMILIES.values() if f.prefix == prefix), None)
        keys = [key for key in self.checkpoints if family is None or key in family.architectures]
        note = ""
        if not keys:  # the family has no class with this head: the first family that has one
            owner = next(f for f in FAMILIES.values() if any(key in f.architectures for key in self.checkpoints))
            note = f" ({prefix} has no class with this head)"
            prefix, keys = owner.prefix, [key for key in self.checkpoints if key in owner.architectures]
        names = " or ".join(prefix + ARCHITECTURES[key].suffix for key in keys)
        article = "an" if names[:1] in "AEIOU" else "a"
        return f"{article} {names} checkpoint" + (f" {self.condition}" if self.condition else "") + note


TASKS: Mapping[str, TaskRow] = {
    row.name: row
    for row in (
        TaskRow(
            "embed",
            None,
            "pooler",
            (),
            "a checkpoint with a pooler (BertModel, BertForPreTraining ...), or pass pooling 'cls' or 'mean',",
            "one vector per text",
        ),
        TaskRow(
            "nsp",
            "nsp",
            "NSP head",
            ("ForPreTraining", "ForNextSentencePrediction"),
            "",
            "probability that sentence B follows sentence A",
        ),
        TaskRow(
            "classify",
            "classifier",
            "classification head",
            ("ForSequenceClassification",),
            "",
            "labels of each text or pair",
        ),
        TaskRow(
            "rerank",
            "classifier",
            "one-logit cross-encoder head",
            ("ForSequenceClassification",),
            "with num_labels=1 (a cross-encoder)",
            "texts ranked by relevance to a query",
        ),
        TaskRow(
            "embed_sparse",
            "mlm",
            "SPLADE pipeline",
            ("ForMaskedLM",),
            "exported from a sentence-transformers SparseEncoder folder (MLM head + SpladePooling)",
            "sparse vocabulary weights per text (SPLADE)",
        ),
        TaskRow("fill_mask", "mlm", "MLM head", ("ForPreTraining", "ForMaskedLM"), "", "top tokens per mask"),
        TaskRow(
            "tag",
            "token_classifier",
            "token-classification head",
            ("ForTokenClassification",),
            "",
            "entities with character offsets",
        ),
        TaskRow("answer", "qa", "question-answering head", ("ForQuestionAnswering",), "", "extractive answers"),
        TaskRow("choose", "choice", "multiple-choice head", ("ForMultipleChoice",), "", "the best of several choices"),
        TaskRow("encode", None, "graph", (), "any checkpoint", "every graph output"),
        TaskRow(
            "zero_shot",
            "classifier",
            "NLI classification head",
            ("ForSequenceClassification",),
            "trained on NLI (an 'entailment' label among its id2label)",
            "candidate labels ranked by an NLI classifier",
        ),
        TaskRow(
            "detect_replaced",
            "discriminator",
            "replaced-token-detection head",
            ("Discriminator",),
            "",
            "per token, the probability it was replaced (ELECTRA)",
        ),
    )
}
