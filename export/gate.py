"""The parity gate: every variant against PyTorch on built-in inputs, before anything is published.

optimum validates one random input and only warns. Here each variant runs the module's pair and 17 more
singles and pairs (1 to 512 tokens, accents, CJK, digits) one at a time, plus one padded batch (and, for an
MLM head, inputs with ``[MASK]`` tokens), and is compared on every head with the transformers class the
export was made from (its own forward, not our wrapper). fp32 and fused variants must stay within
``EXACT_MAX_ABS`` on every output; the int8 and bf16 variants within ``INT8_THRESHOLDS`` and
``BF16_THRESHOLDS``, which judge hidden states by cosines and heads in task terms: NSP and label
probabilities and argmax agreement, tag agreement per token, answer start/end agreement, fill-mask top-1
and top-5 agreement. A breach fails the export.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
import torch
from tokenizers import Tokenizer

from bertonnx.manifest import GRAPH_OUTPUT_NAMES, MLM_HEAD_INPUT, MLM_HEAD_OUTPUT, NSP_IS_NEXT_INDEX

from .graph import WithHeads, graph_inputs, row_of, run_class

#: The module's pair: B follows A.
MODULE_PAIR = ("the weather is nice", "i agree with you")
_LONG_TEXT = (
    "The history of natural language processing generally started in the 1950s, although work can be found "
    "from earlier periods. In 1950, Alan Turing published an article titled Computing Machinery and "
    "Intelligence which proposed what is now called the Turing test as a criterion of intelligence. "
)
#: Built-in gate inputs: (text, pair or None). Lengths run from 2 tokens to the 512-token limit.
GATE_INPUTS: tuple[tuple[str, str | None], ...] = (
    MODULE_PAIR,
    ("", None),
    ("a", None),
    ("Hello, world!", None),
    ("The quick brown fox jumps over the lazy dog.", None),
    ("Café déjà vu: naïve façade, résumé.", None),
    ("北京是中国的首都。東京は日本の首都です。", None),
    ("Call 555-0199 before 10:30 on 2024-03-05; it costs $1,234.56 (about €1.1k).", None),
    ("he went to the store.", "he bought a gallon of milk."),
    ("he went to the store.", "penguins are flightless birds."),
    ("What is the capital of France?", "Paris is the capital and largest city of France."),
    ("I loved this film.", "The acting, the music and the story were all wonderful, and I would watch it again."),
    ("Unbelievably, the antidisestablishmentarianism debate continued.", None),
    ("short", _LONG_TEXT),
    (_LONG_TEXT, "It was widely discussed."),
    (_LONG_TEXT * 2, _LONG_TEXT),
    (_LONG_TEXT * 3, None),
    (_LONG_TEXT * 8, None),  # truncated to exactly the model's position limit (512 tokens)
)
#: Indices of GATE_INPUTS that run together as one right-padded batch.
PADDED_BATCH = (0, 1, 3, 8, 11, 13)
#: More inputs for exports with an MLM head: one and several ``[MASK]`` tokens, in a pair, with accents.
MASKED_INPUTS: tuple[tuple[str, str | None], ...] = (
    ("The capital of France is [MASK].", None),
    ("[MASK] went to the [MASK] to buy a [MASK] of milk.", None),
    ("he went to the store.", "he bought a [MASK] of milk."),
    ("Café déjà vu: naïve [MASK], résumé.", None),
    ("short", _LONG_TEXT + " The [MASK] test is named after him."),
)
MASK_TOKEN = "[MASK]"
#: Fill-mask top-k agreement is measured for these k.
MLM_TOP_K = 5
#: Agreement in task terms is counted up to ties: a variant's choice (label, tag, answer start or end, a
#: fill-mask token) agrees when the reference's own probability for it is within this of the reference's
#: choice. Seeded heads score near-uniformly over hundreds of positions, where a 1e-4 logit change picks
#: another position of the same probability; a trained head's choices stand far apart and must agree exactly.
TIE_PROBABILITY = 0.01

EXACT_MAX_ABS = 1e-4
#: The figure of :func:`padded_batch_figures`.
PADDED_BATCH_KEY = "padded_batch_max_abs"
#: int8 thresholds: minimum cosine of hidden states and pooler, maximum NSP probability error, minimum NSP
#: argmax agreement, and batch invariance (a row of the padded batch against the same input alone). Measured
#: with per-row int8 on these gate inputs: real MiniLM weights hidden 0.9918, pooler 0.9987 (the old
#: per-tensor dynamic int8 gave 0.971 / 0.994 and would now fail);
#: seeded bert-base 0.99957 / 0.99966; NSP probability error below 0.01 on both; padded batch max abs 0
#: on both (per-row scales). NSP is judged on probabilities, not logit cosines: a seeded head's logits are
#: about 0.01, so their cosine swings with noise that changes no probability.
INT8_THRESHOLDS = {
    "last_hidden_state_min_cosine": 0.98,
    "pooler_output_min_cosine": 0.995,
    "nsp_probability_max_abs": 0.01,
    "nsp_argmax_agreement": 0.9,
    PADDED_BATCH_KEY: EXACT_MAX_ABS,
    "logits_score_max_abs": 0.05,
    "logits_label_agreement": 0.9,
    "token_tag_agreement": 0.9,
    "span_start_agreement": 0.9,
    "span_end_agreement": 0.9,
    "mlm_top1_agreement": 0.9,
    "mlm_top5_agreement": 0.8,
    "choice_probability_max_abs": 0.05,
    "choice_agreement": 0.9,
    "rtd_probability_max_abs": 0.05,
    "rtd_agreement": 0.9,
}
#: bf16 (OpenVINO) thresholds. Measured on these gate inputs (hidden / pooler min cosine, NSP probability
#: error): seeded bert-base 0.99998 / 0.99997 / 0.0012; real MiniLM weights 0.99992 / 0.99998 / 0.00008.
#: The cosine limits are the accuracy the fast path promises (0.999), so a bf16 file that keeps less fails.
BF16_THRESHOLDS = {
    "last_hidden_state_min_cosine": 0.999,
    "pooler_output_min_cosine": 0.999,
    "nsp_probability_max_abs": 0.005,
    "nsp_argmax_agreement": 0.95,
    "logits_score_max_abs": 0.01,
    "logits_label_agreement": 0.95,
    "token_tag_agreement": 0.95,
    "span_start_agreement": 0.95,
    "span_end_agreement": 0.95,
    "mlm_top1_agreement": 0.95,
    "mlm_top5_agreement": 0.9,
    "choice_probability_max_abs": 0.01,
    "choice_agreement": 0.95,
    "rtd_probability_max_abs": 0.01,
    "rtd_agreement": 0.95,
}
#: Variants judged by cosines and task-level measures instead of ``EXACT_MAX_ABS``.
LOSSY_THRESHOLDS = {"int8": INT8_THRESHOLDS, "bf16": BF16_THRESHOLDS}
#: The output each task-level measure judges (cosine measures judge ``<output>_min_cosine``'s output).
MEASURE_OUTPUTS = {
    "nsp_probability_max_abs": "nsp_logits",
    "nsp_argmax_agreement": "nsp_logits",
    "logits_score_max_abs": "logits",
    "logits_label_agreement": "logits",
    "token_tag_agreement": "token_logits",
    "span_start_agreement": "start_logits",
    "span_end_agreement": "end_logits",
    "mlm_top1_agreement": MLM_HEAD_OUTPUT,
    "mlm_top5_agreement": MLM_HEAD_OUTPUT,
    "choice_probability_max_abs": "choice_logits",
    "choice_agreement": "choice_logits",
    "rtd_probability_max_abs": "rtd_logits",
    "rtd_agreement": "rtd_logits",
}
#: Every output the gate compares, in report order: the main graph's, then the MLM head's.
COMPARED_OUTPUTS = (*GRAPH_OUTPUT_NAMES, MLM_HEAD_OUTPUT)
#: Outputs with one vector per valid token (padding is left out of every comparison).
TOKEN_OUTPUTS = ("last_hidden_state", "token_logits")
#: Outputs with one value per valid token (compared per row over its valid positions).
POSITION_OUTPUTS = ("start_logits", "end_logits", "rtd_logits")


@dataclass
class Case:
    """One model call: padded int64 arrays, each row's valid length and the ``[MASK]`` positions.

    ``masks`` is ``[k, 2]`` int64 (row, position), empty when the inputs hold no mask or the gate does not
    judge an MLM head.
    """

    name: str
    feeds: dict[str, np.ndarray]
    lengths: list[int]
    masks: np.ndarray = field(default_factory=lambda: np.zeros((0, 2), dtype=np.int64))


def build_cases(
    tokenizer_path: Path, max_length: int, *, masked: bool = False, mask_token: str = MASK_TOKEN
) -> list[Case]:
    """Tokenize the gate inputs with the exported ``tokenizer.json`` (as the runtime will).

    Args:
        max_length: the tokens an input may have (the usable positions).
        masked: add :data:`MASKED_INPUTS` (for an export with an MLM head) and record mask positions.
        mask_token: the tokenizer's mask token (``[MASK]``, ``<mask>``), written where the inputs say ``[MASK]``.
    """
    tokenizer = Tokenizer.from_file(str(tokenizer_path))
    tokenizer.no_padding()
    tokenizer.enable_truncation(max_length, strategy="longest_first")
    masked_inputs = tuple(
        (text.replace(MASK_TOKEN, mask_token), None if pair is None else pair.replace(MASK_TOKEN, mask_token))
        for text, pair in MASKED_INPUTS
    )
    inputs = GATE_INPUTS + (masked_inputs if masked else ())
    mask_id = tokenizer.token_to_id(mask_token) if masked else None
    encodings = [tokenizer.encode(text) if pair is None else tokenizer.encode(text, pair) for text, pair in inputs]
    cases = [
        make_case(f"input {i} ({len(enc.ids)} tokens{', pair' if inputs[i][1] is not None else ''})", [enc], mask_id)
        for i, enc in enumerate(encodings)
    ]
    cases.append(make_case(f"padded batch of {len(PADDED_BATCH)}", [encodings[i] for i in PADDED_BATCH], mask_id))
    return cases


def make_case(name: str, encodings: list[Any], mask_id: int | None = None) -> Case:
    """One right-padded batch from encodings (anything with ``ids`` and ``type_ids`` lists); with ``mask_id``,
    the positions of that token are the case's ``masks``."""
    length = max(len(enc.ids) for enc in encodings)
    feeds = {
        key: np.zeros((len(encodings), length), dtype=np.int64)
        for key in ("input_ids", "attention_mask", "token_type_ids")
    }
    for row, enc in enumerate(encodings):
        n = len(enc.ids)
        feeds["input_ids"][row, :n] = enc.ids
        feeds["attention_mask"][row, :n] = 1
        feeds["token_type_ids"][row, :n] = enc.type_ids
    masks = np.argwhere(feeds["input_ids"] == mask_id).astype(np.int64) if mask_id is not None else None
    if masks is None:
        return Case(name, feeds, [len(enc.ids) for enc in encodings])
    return Case(name, feeds, [len(enc.ids) for enc in encodings], masks)


def reference_outputs(model: Any, cases: list[Case]) -> list[dict[str, np.ndarray]]:
    """PyTorch outputs of every case (fp32, eval mode, no grad), from the transformers class's own forward.

    Args:
        model: a transformers model of an :mod:`export.heads` row, or a :class:`WithHeads` around one.

    Returns:
        Per case the row's graph outputs, plus ``mlm_logits`` ``[k, vocab]`` at the case's ``masks`` when
        the model has an MLM head.
    """
    net = model.model if isinstance(model, WithHeads) else model
    row = row_of(net)
    inputs = graph_inputs(net)
    results = []
    with torch.inference_mode():
        for case in cases:
            feeds = {k: torch.from_numpy(v) for k, v in case.feeds.items() if k in inputs}
            if "choice_logits" in row.outputs:  # [choices, t] -> one question with those choices
                feeds = {k: v[None] for k, v in feeds.items()}
            found = run_class(net, feeds)
            result = {name: found[name].float().numpy() for name in row.outputs}
            if row.has_mlm and len(case.masks):
                logits = found[MLM_HEAD_OUTPUT][case.masks[:, 0], case.masks[:, 1]]
                result[MLM_HEAD_OUTPUT] = logits.float().numpy()
            results.append(result)
    return results


def variant_outputs(
    path: Path, variant: str, cases: list[Case], mlm_head: Path | None = None
) -> list[dict[str, np.ndarray]]:
    """Outputs of every case from ``variant``'s file, on the engine the runtime uses for it.

    With ``mlm_head`` (the MLM head graph, always run on onnxruntime), the variant's hidden states at each
    case's mask positions go through it, as the runtime's fill-mask does, giving ``mlm_logits``.
    onnxruntime runs with spinning off so the PyTorch side is not slowed.
    """
    from bertonnx.options import RuntimeOptions
    from bertonnx.session import open_variant_session

    options = RuntimeOptions(allow_spinning=False)
    session = open_variant_session(path, variant, options)
    head = open_variant_session(mlm_head, "fp32", options) if mlm_head is not None else None
    names = [o.name for o in session.get_outputs()]
    inputs = [i.name for i in session.get_inputs()]
    results = []
    for case in cases:
        feeds = {name: case.feeds[name] for name in inputs}
        values = dict(zip(names, session.run(names, feeds), strict=True))
        if head is not None and len(case.masks):
            gathered = values["last_hidden_state"][case.masks[:, 0], case.masks[:, 1]]
            (values[MLM_HEAD_OUTPUT],) = head.run([MLM_HEAD_OUTPUT], {MLM_HEAD_INPUT: gathered})
        results.append(values)
    return results


def _cosines(a: np.ndarray, b: np.ndarray) -> np.ndarray:
    a64, b64 = a.astype(np.float64), b.astype(np.float64)
    denom = np.linalg.norm(a64, axis=-1) * np.linalg.norm(b64, axis=-1)
    return np.sum(a64 * b64, axis=-1) / np.maximum(denom, 1e-30)


def _is_next(logits: np.ndarray) -> np.ndarray:
    z = logits.astype(np.float64)
    z = np.exp(z - z.max(axis=-1, keepdims=True))
    return z[..., NSP_IS_NEXT_INDEX] / z.sum(axis=-1)


def _softmax(logits: np.ndarray) -> np.ndarray:
    z = logits.astype(np.float64)
    z = np.exp(z - z.max(axis=-1, keepdims=True))
    result: np.ndarray = z / z.sum(axis=-1, keepdims=True)
    return result


def _sigmoid(logits: np.ndarray) -> np.ndarray:
    result: np.ndarray = 1.0 / (1.0 + np.exp(-logits.astype(np.float64)))
    return result


def classifier_scores(logits: np.ndarray, problem_type: str | None) -> np.ndarray:
    """Scores as ``pipeline("text-classification")`` gives them by default: softmax for single-label,
    sigmoid for multi-label and for one label (a cross-encoder), the logits themselves for regression."""
    if problem_type == "regression":
        return logits.astype(np.float64)
    if problem_type == "multi_label_classification" or logits.shape[-1] == 1:
        return _sigmoid(logits)
    return _softmax(logits)


def _valid(name: str, case: Case, array: np.ndarray) -> list[np.ndarray]:
    """The vectors of ``name`` that count: valid tokens only for per-token outputs."""
    if name in TOKEN_OUTPUTS:
        return [np.concatenate([array[i, :n] for i, n in enumerate(case.lengths)])]
    if name in POSITION_OUTPUTS:
        return [array[i : i + 1, :n] for i, n in enumerate(case.lengths)]
    return [array]


class _Tally:
    """Worst figures and agreement counts over every case."""

    def __init__(self) -> None:
        self.worst: dict[str, float] = {}
        self.counts: dict[str, list[int]] = {}

    def most(self, key: str, value: float) -> None:
        self.worst[key] = max(self.worst.get(key, 0.0), value)

    def least(self, key: str, value: float) -> None:
        self.worst[key] = min(self.worst.get(key, 1.0), value)

    def agree(self, key: str, equal: np.ndarray) -> None:
        count = self.counts.setdefault(key, [0, 0])
        count[0] += int(np.sum(equal))
        count[1] += int(equal.size)

    def figures(self) -> dict[str, float]:
        return {**self.worst, **{k: (a / n if n else 1.0) for k, (a, n) in self.counts.items()}}


def compare(
    cases: list[Case],
    reference: list[dict[str, np.ndarray]],
    candidate: list[dict[str, np.ndarray]],
    *,
    problem_type: str | None = None,
) -> dict[str, float]:
    """Worst-case figures over all cases: max abs diff and min cosine per output, and the task measures.

    Outputs compared are those of the reference. Per-token outputs count valid (unpadded) tokens only.
    Task measures: ``nsp_probability_max_abs`` / ``nsp_argmax_agreement``; ``logits_score_max_abs``
    (scores by ``problem_type``, see :func:`classifier_scores`; for regression the error relative to
    ``max(1, max |logit|)``) / ``logits_label_agreement`` (argmax, or each label's score above 0.5 for
    multi-label and one-label heads; none for regression); ``token_tag_agreement``;
    ``span_start_agreement`` / ``span_end_agreement`` (argmax over each row's valid positions);
    ``mlm_top1_agreement`` / ``mlm_top5_agreement`` (share of the candidate's top 5 tokens that are in the
    reference's top 5) at the mask positions. Agreement counts ties as agreeing (:data:`TIE_PROBABILITY`).

    Raises:
        ValueError: a candidate output's shape differs from the reference's.
    """
    tally = _Tally()
    for case, ref, got in zip(cases, reference, candidate, strict=True):
        for name in [n for n in COMPARED_OUTPUTS if n in ref]:
            if name not in got or ref[name].shape != got[name].shape:
                shape = got[name].shape if name in got else "nothing"
                raise ValueError(f"{case.name}: {name} has shape {shape}, PyTorch gives {ref[name].shape}")
            for r, g in zip(_valid(name, case, ref[name]), _valid(name, case, got[name]), strict=True):
                finite = bool(np.isfinite(g).all())
                tally.most(f"{name}_max_abs", float(np.max(np.abs(r - g))) if finite and r.size else 0.0)
                tally.least(f"{name}_min_cosine", float(np.min(_cosines(r, g))) if finite and r.size else -1.0)
            _task_measures(tally, name, case, ref[name], got[name], problem_type)
    return tally.figures()


def _task_measures(
    tally: _Tally, name: str, case: Case, r: np.ndarray, g: np.ndarray, problem_type: str | None
) -> None:
    if name == "nsp_logits":
        tally.agree("nsp_argmax_agreement", np.argmax(r, -1) == np.argmax(g, -1))
        tally.most("nsp_probability_max_abs", float(np.max(np.abs(_is_next(r) - _is_next(g)))))
    elif name == "logits":
        rs, gs = classifier_scores(r, problem_type), classifier_scores(g, problem_type)
        scale = max(1.0, float(np.max(np.abs(rs)))) if problem_type == "regression" else 1.0
        tally.most("logits_score_max_abs", float(np.max(np.abs(rs - gs))) / scale)
        if problem_type == "regression":
            return
        if problem_type == "multi_label_classification" or r.shape[-1] == 1:
            tally.agree("logits_label_agreement", ((rs > 0.5) == (gs > 0.5)) | (np.abs(rs - 0.5) < TIE_PROBABILITY))
        else:
            tally.agree("logits_label_agreement", _top1_agrees(r, g))
    elif name == "token_logits":
        (rv,), (gv,) = _valid(name, case, r), _valid(name, case, g)
        tally.agree("token_tag_agreement", _top1_agrees(rv, gv))
    elif name == "choice_logits":
        rp, gp = _softmax(r[None]), _softmax(g[None])
        tally.most("choice_probability_max_abs", float(np.max(np.abs(rp - gp))))
        tally.agree("choice_agreement", _top1_agrees(r[None], g[None]))
    elif name == "rtd_logits":  # P(replaced) per valid token, judged as the 0.5 decision
        for rv, gv in zip(_valid(name, case, r), _valid(name, case, g), strict=True):
            rp, gp = _sigmoid(rv), _sigmoid(gv)
            tally.most("rtd_probability_max_abs", float(np.max(np.abs(rp - gp))) if rp.size else 0.0)
            tally.agree("rtd_agreement", ((rp > 0.5) == (gp > 0.5)) | (np.abs(rp - 0.5) < TIE_PROBABILITY))
    elif name in POSITION_OUTPUTS:
        key = "span_start_agreement" if name == "start_logits" else "span_end_agreement"
        for rv, gv in zip(_valid(name, case, r), _valid(name, case, g), strict=True):
            tally.agree(key, _top1_agrees(rv, gv))
    elif name == MLM_HEAD_OUTPUT:
        tally.agree("mlm_top1_agreement", _top1_agrees(r, g))
        probability = _softmax(r)
        kth = np.sort(probability, axis=-1)[:, -MLM_TOP_K]
        top_g = np.argsort(-g, axis=-1)[:, :MLM_TOP_K]
        chosen = np.take_along_axis(probability, top_g, axis=-1)
        tally.agree("mlm_top5_agreement", chosen >= kth[:, None] - TIE_PROBABILITY)


def _top1_agrees(reference: np.ndarray, candidate: np.ndarray) -> np.ndarray:
    """Per row: the candidate's argmax is the reference's, or scores within :data:`TIE_PROBABILITY` of it
    by the reference's softmax."""
    probability = _softmax(reference)
    best = probability.max(axis=-1)
    chosen = np.take_along_axis(probability, np.argmax(candidate, axis=-1)[..., None], axis=-1)[..., 0]
    agrees: np.ndarray = chosen >= best - TIE_PROBABILITY
    return agrees


def padded_batch_figures(cases: list[Case], candidate: list[dict[str, np.ndarray]]) -> dict[str, float]:
    """The largest max abs difference, over outputs, between each row of the padded batch (the last case) and
    the same input run alone (its own case), on valid tokens: how much a result depends on its batch mates.

    Raises:
        ValueError: ``cases`` are not :func:`build_cases`' (the gate inputs first, the padded batch last).
    """
    if len(cases) < len(GATE_INPUTS) + 1 or len(candidate) != len(cases):
        raise ValueError(f"expected the gate's cases (at least {len(GATE_INPUTS) + 1}), got {len(cases)}")
    batch = candidate[-1]
    worst = 0.0
    for row, index in enumerate(PADDED_BATCH):
        n = cases[index].lengths[0]
        for name, values in batch.items():
            if name not in candidate[index] or values.shape[0] != len(PADDED_BATCH):
                continue  # rows are not inputs (mlm_logits: one row per mask)
            alone, inside = candidate[index][name][0], values[row]
            if name in TOKEN_OUTPUTS or name in POSITION_OUTPUTS:
                alone, inside = alone[:n], inside[:n]
            worst = max(worst, float(np.max(np.abs(alone - inside))) if np.isfinite(inside).all() else float("inf"))
    return {PADDED_BATCH_KEY: worst}


def breaches_by_output(variant: str, figures: dict[str, float]) -> dict[str, list[str]]:
    """The gate's verdict per output present in ``figures``: human-readable breaches (empty lists when it
    passes). Task measures count against the output they judge (:data:`MEASURE_OUTPUTS`)."""
    present = [name for name in COMPARED_OUTPUTS if f"{name}_max_abs" in figures]
    found: dict[str, list[str]] = {name: [] for name in present}
    if variant in LOSSY_THRESHOLDS:
        for key, limit in LOSSY_THRESHOLDS[variant].items():
            if key not in figures:
                continue
            if key == PADDED_BATCH_KEY:
                if not figures[key] <= limit:
                    found.setdefault("last_hidden_state", []).append(
                        f"{variant}: a row of the padded batch differs from the same input alone by "
                        f"{figures[key]:.3g} > {limit:g} (its results depend on its batch mates)"
                    )
                continue
            output = MEASURE_OUTPUTS.get(key, key.removesuffix("_min_cosine"))
            if key.endswith("_max_abs"):
                if not figures[key] <= limit:
                    found[output].append(f"{variant}: {key} = {figures[key]:.6f} > {limit}")
            elif not figures[key] >= limit:
                found[output].append(f"{variant}: {key} = {figures[key]:.6f} < {limit}")
    else:
        for name in present:
            value = figures[f"{name}_max_abs"]
            if not value <= EXACT_MAX_ABS:
                found[name].append(f"{variant}: {name} max abs diff {value:.3g} > {EXACT_MAX_ABS:g}")
    return found


def breaches(variant: str, figures: dict[str, float]) -> list[str]:
    """The gate's verdict on one variant: a list of human-readable breaches (empty when it passes)."""
    return [problem for problems in breaches_by_output(variant, figures).values() for problem in problems]
