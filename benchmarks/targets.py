"""Issue 6's five speed targets, judged from the results of one bench run.

Each target is a list of criteria (a measured figure against a limit). A target is met when every
criterion is met, not met when any criterion fails, and otherwise not measured, with the reason the figure
is missing (no bf16 variant, no ``--real-weights`` export, B1×T128 not in the grid, a runner that failed
its check). The targets are stated for bert-base at 2 threads: on another model or thread budget the
figures are still listed, but no target is judged. Pure functions of the results dict: no torch, no timing.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass
from itertools import groupby
from typing import Any

#: The accurate fast path of target 1 and the fast side of target 5.
FAST_PATH_VARIANT = "bf16"
#: The exact path of target 2 and the fp32 side of target 5.
EXACT_PATH_VARIANT = "fp32"
#: The fastest lossy variant, shown beside target 1 for information (it is not the accurate fast path).
FASTEST_LOSSY_VARIANT = "int8"
#: The model and thread budget the targets are stated for.
TARGET_THREADS = 2
TARGET_MODEL = {"num_hidden_layers": 12, "hidden_size": 768, "num_attention_heads": 12, "intermediate_size": 3072}

FAST_P50_MAX_MS = 40.0
FAST_MIN_COSINE = 0.999
FAST_NSP_AGREEMENT_MIN = 0.99
EXACT_P50_MAX_MS = 115.0
EXACT_MAX_ABS = 1e-4
CORPUS_SPEEDUP_MIN = 2.0
OVERHEAD_PCT_MAX = 5.0
FAST_COLD_START_MAX_S = 0.6
EXACT_COLD_START_MAX_S = 1.0
RSS_PER_FILE_MAX = 1.2

MET, NOT_MET, NOT_MEASURED, INFORMATIONAL = "met", "not met", "not measured", "informational"
STATUSES = (MET, NOT_MET, NOT_MEASURED)
REAL_WEIGHTS_FLAG = "--real-weights DIR"
OUTPUTS_COMPARED_BY_MAX_ABS = ("last_hidden_state", "pooler_output", "nsp_logits")


@dataclass(frozen=True)
class Criterion:
    """One measured figure against its limit; ``value`` is None when it was not measured (see ``missing``)."""

    label: str
    value: float | None
    limit: float
    at_most: bool
    unit: str = ""
    #: Format spec of ``value`` in the report.
    fmt: str = ".2f"
    missing: str | None = None

    @property
    def status(self) -> str:
        if self.value is None:
            return NOT_MEASURED
        return MET if (self.value <= self.limit if self.at_most else self.value >= self.limit) else NOT_MET

    def text(self) -> str:
        if self.value is None:
            return f"{self.label}: not measured ({self.missing})"
        sign = ("≤" if self.status == MET else ">") if self.at_most else ("≥" if self.status == MET else "<")
        return f"{self.label} {self.value:{self.fmt}}{self.unit} {sign} {self.limit:g}{self.unit}"


def combine(statuses: list[str]) -> str:
    """Not met if any is not met, else not measured if any is missing (or there is none), else met."""
    if NOT_MET in statuses:
        return NOT_MET
    if not statuses or NOT_MEASURED in statuses:
        return NOT_MEASURED
    return MET


def out_of_scope(results: dict[str, Any]) -> str | None:
    """Why this run cannot judge the targets (not bert-base at 2 threads), or None when it can."""
    config = results["model"]["config"]
    threads = results["threads"]["budget"]
    if all(config.get(key) == value for key, value in TARGET_MODEL.items()) and threads == TARGET_THREADS:
        return None
    return (
        f"the targets are stated for bert-base ({TARGET_MODEL['num_hidden_layers']} layers, hidden "
        f"{TARGET_MODEL['hidden_size']}) at {TARGET_THREADS} threads; this run is {config['num_hidden_layers']} "
        f"layers, hidden {config['hidden_size']}, at {threads} threads"
    )


def _unavailable(results: dict[str, Any], variant: str, *, timed: bool = True) -> str | None:
    """Why ``variant`` was not checked (or, when ``timed``, not timed) in this run; None when it was."""
    if variant not in results["model"]["variants"]:
        return f"the export has no {variant} variant"
    if variant not in results["runners"]:
        return f"{variant} was not among --runners"
    if timed and not results["runners"][variant]["correct"]:
        return f"{variant} failed the correctness check"
    return None


def _latency(results: dict[str, Any], variant: str, limit: float) -> Criterion:
    label = f"{variant} B1×T128 p50"
    missing = _unavailable(results, variant)
    row = next((s for s in results["summary_b1_t128"] if s["runner"] == variant), None)
    if missing is None and row is None:
        missing = "B1×T128 is not in this run's grid"
    value = None if missing or row is None else float(row["p50_ms"])
    if row is not None and row["processes"] > 1:
        label += f" (median of {row['processes']} processes)"
    return Criterion(label, value, limit, at_most=True, unit=" ms", fmt=".1f", missing=missing)


def _real_weights(results: dict[str, Any], variant: str) -> list[Criterion]:
    real = results.get("real_weights")
    missing = None
    figures: dict[str, float] = {}
    if real is None:
        missing = f"real-weights accuracy was not measured in this run; pass {REAL_WEIGHTS_FLAG}"
    elif variant not in real["figures"]:
        missing = f"the real-weights export has no {variant} variant"
    else:
        figures = real["figures"][variant]
    return [
        Criterion(
            f"real weights: {variant} pooler min cosine",
            figures.get("pooler_output_min_cosine"),
            FAST_MIN_COSINE,
            at_most=False,
            fmt=".5f",
            missing=missing,
        ),
        Criterion(
            "mean-pooled min cosine",
            figures.get("mean_pooled_min_cosine"),
            FAST_MIN_COSINE,
            at_most=False,
            fmt=".5f",
            missing=missing,
        ),
        Criterion(
            "NSP argmax agreement",
            figures.get("nsp_argmax_agreement"),
            FAST_NSP_AGREEMENT_MIN,
            at_most=False,
            fmt=".3f",
            missing=missing,
        ),
    ]


def _weights_label(results: dict[str, Any]) -> str:
    model = results["model"]
    if model["weights_kind"] == "random":
        return "seeded random weights"
    return "pretrained weights" + (" with seeded random heads" if model["random_weights"] else "")


def _check_note(results: dict[str, Any], variant: str) -> str | None:
    """The bench's own check of ``variant`` on the benchmarked export, labelled with its weights."""
    info = results["runners"].get(variant)
    figures = (info or {}).get("figures") or {}
    if not {"pooler_output_min_cosine", "mean_pooled_min_cosine", "nsp_argmax_agreement"} <= set(figures):
        return None
    return (
        f"{variant} on the benchmarked export ({_weights_label(results)}), the bench's check: pooler min cosine "
        f"{figures['pooler_output_min_cosine']:.5f}, mean-pooled {figures['mean_pooled_min_cosine']:.5f}, "
        f"NSP argmax agreement {figures['nsp_argmax_agreement']:.3f}"
    )


def _fast_path_criteria(results: dict[str, Any], variant: str) -> tuple[list[Criterion], list[str]]:
    criteria = [_latency(results, variant, FAST_P50_MAX_MS), *_real_weights(results, variant)]
    notes = [note for note in [_check_note(results, variant)] if note]
    return criteria, notes


def _max_abs(results: dict[str, Any], variant: str) -> Criterion:
    """The check's worst max abs difference over the outputs (recorded for a variant that failed it, too)."""
    missing = _unavailable(results, variant, timed=False)
    figures = results["runners"].get(variant, {}).get("figures") or {}
    keys = [f"{name}_max_abs" for name in OUTPUTS_COMPARED_BY_MAX_ABS]
    if missing is None and not all(key in figures for key in keys):
        missing = "the check recorded no max abs figures"
    value = None if missing else max(float(figures[key]) for key in keys)
    label = f"{variant} max abs diff vs PyTorch fp32 ({_weights_label(results)})"
    return Criterion(label, value, EXACT_MAX_ABS, at_most=True, fmt=".2e", missing=missing)


def _per_variant(
    section: list[dict[str, Any]], key: str, label: str, limit: float, *, at_most: bool, unit: str
) -> list[Criterion]:
    """One criterion per ONNX variant timed in ``section`` (the runtime's overhead and batching)."""
    return [
        Criterion(f"{row['runner']} {label}", float(row[key]), limit, at_most=at_most, unit=unit) for row in section
    ]


def _cold_start(results: dict[str, Any], variant: str, limit_s: float) -> list[Criterion]:
    missing = _unavailable(results, variant)
    probe = next((c for c in results["cold_start"] if c["runner"] == variant), None)
    if missing is None and probe is None:
        missing = f"{variant} has no cold-start probe"
    # The definition: import + load + first result, timed inside the fresh process. The parent's
    # spawn-to-exit wall time (interpreter start-up and teardown on top) is reported beside it.
    seconds = (
        None
        if missing or probe is None
        else float(probe["import_s"]) + float(probe["load_s"]) + float(probe["first_result_s"])
    )
    ratio = None if missing or probe is None else float(probe["rss_per_file_mb"])
    wall = "" if seconds is None or probe is None else f" (spawn to exit {float(probe['wall_s']):.2f} s)"
    return [
        Criterion(
            f"{variant} cold start (import + load + first result){wall}",
            seconds,
            limit_s,
            at_most=True,
            unit=" s",
            missing=missing,
        ),
        Criterion(f"{variant} peak RSS / file size", ratio, RSS_PER_FILE_MAX, at_most=True, missing=missing),
    ]


def measured_text(criteria: list[Criterion]) -> str:
    """The criteria as one line; neighbours missing for the same reason share it (``a, b: not measured (why)``)."""
    parts: list[str] = []
    for missing, group in groupby(criteria, key=lambda c: None if c.value is not None else c.missing):
        shown = list(group)
        if missing is None or len(shown) == 1:
            parts += [c.text() for c in shown]
        else:
            parts.append(f"{', '.join(c.label for c in shown)}: not measured ({missing})")
    return "; ".join(parts) or "nothing measured"


def _row(number: int | str, name: str, required: str, criteria: list[Criterion], notes: list[str]) -> dict[str, Any]:
    return {
        "target": number,
        "name": name,
        "required": required,
        "criteria": [{**asdict(c), "status": c.status} for c in criteria],
        "measured": measured_text(criteria),
        "status": combine([c.status for c in criteria]),
        "status_reason": None,
        "notes": notes,
    }


def evaluate(results: dict[str, Any]) -> dict[str, Any]:
    """The targets section: five target rows, the informational int8 row, and what they were judged on.

    Args:
        results: the bench results (``runners``, ``summary_b1_t128``, ``overhead``, ``corpus``,
            ``cold_start``, ``model``, ``threads``, ``settings`` and ``real_weights``).
    """
    fast, exact, lossy = FAST_PATH_VARIANT, EXACT_PATH_VARIANT, FASTEST_LOSSY_VARIANT
    fast_criteria, fast_notes = _fast_path_criteria(results, fast)
    real = results.get("real_weights")
    if real is not None and real["random_heads"]:
        heads = real["random_heads"]
        fast_notes.append(
            f"the real-weights export seeds its {' and '.join(heads)} head(s) at random (--allow-random-heads)"
            + ("; a seeded NSP head gives near-zero logits, a harsh test of argmax agreement" if "nsp" in heads else "")
        )
    if real is not None:
        fast_notes.append(
            f"real weights: {real['directory']} ({real['reference']['model']}), the export gate's {len(real['cases'])} "
            f"cases ({real['sequences']} sequences)"
        )
    corpus = results["corpus"]["results"]
    rows = [
        _row(
            1,
            f"accurate fast path ({fast})",
            f"B1×T128 p50 ≤ {FAST_P50_MAX_MS:g} ms; on real weights vs PyTorch fp32: pooler and mean-pooled min "
            f"cosine ≥ {FAST_MIN_COSINE}, NSP argmax agreement ≥ {FAST_NSP_AGREEMENT_MIN:.0%}",
            fast_criteria,
            fast_notes,
        ),
        _row(
            2,
            f"exact fp32 path ({exact})",
            f"B1×T128 p50 ≤ {EXACT_P50_MAX_MS:g} ms with max abs diff ≤ {EXACT_MAX_ABS:g}",
            [_latency(results, exact, EXACT_P50_MAX_MS), _max_abs(results, exact)],
            [],
        ),
        _row(
            3,
            "variable-length throughput",
            f"length-sorted batching ≥ {CORPUS_SPEEDUP_MIN:g}× input-order batching on the mixed-length corpus, "
            "every variant timed",
            _per_variant(corpus, "speedup", "sorted / naive", CORPUS_SPEEDUP_MIN, at_most=False, unit="×"),
            [] if corpus else ["no ONNX variant was timed on the corpus"],
        ),
        _row(
            4,
            "runtime overhead",
            f"tokenize + batch + post-process ≤ {OVERHEAD_PCT_MAX:g}% of end to end at B1×T16, every variant timed",
            _per_variant(results["overhead"], "overhead_pct", "overhead", OVERHEAD_PCT_MAX, at_most=True, unit="%"),
            [] if results["overhead"] else ["no ONNX variant was timed for overhead"],
        ),
        _row(
            5,
            "cold start and memory",
            f"fresh process to first result (wall) ≤ {FAST_COLD_START_MAX_S:g} s for {fast}, ≤ "
            f"{EXACT_COLD_START_MAX_S:g} s for {exact}; peak RSS ≤ {RSS_PER_FILE_MAX:g}× the model's files",
            [*_cold_start(results, fast, FAST_COLD_START_MAX_S), *_cold_start(results, exact, EXACT_COLD_START_MAX_S)],
            [],
        ),
    ]
    lossy_criteria, lossy_notes = _fast_path_criteria(results, lossy)
    name = f"fastest lossy variant ({lossy})"
    informational = _row("1 (info)", name, "target 1's criteria, for comparison", lossy_criteria, lossy_notes)
    informational.update(beside_target=1, judged_against_target=informational["status"], status=INFORMATIONAL)
    scope = out_of_scope(results)
    if scope is not None:
        for row in rows:
            row.update(status=NOT_MEASURED, status_reason=f"not judged: {scope}")
        informational["judged_against_target"] = NOT_MEASURED
    quick = results["settings"]["quick"]
    return {
        "fast_path_variant": fast,
        "exact_path_variant": exact,
        "fastest_lossy_variant": lossy,
        "judged": scope is None,
        "out_of_scope": scope,
        "latency_statistic": (
            f"median over {results['settings']['repeats']} fresh process(es) of each process's B1×T128 p50"
        ),
        "quick": quick,
        "rows": rows,
        "informational": [informational],
    }


#: The corpus-throughput targets: texts/s against the sentence-transformers (torch) peer on the mixed corpus.
THROUGHPUT_EXACT_SPEEDUP_MIN = 1.2
THROUGHPUT_FAST_SPEEDUP_MIN = 2.5
THROUGHPUT_EXACT_MAX_ABS = 1e-4
THROUGHPUT_FAST_MIN_COSINE = 0.999


def _throughput_row(section: dict[str, Any] | None, runner: str) -> dict[str, Any] | None:
    if section is None:
        return None
    return next((row for row in section["rows"] if row["runner"] == runner), None)


def evaluate_throughput(results: dict[str, Any]) -> dict[str, Any]:
    """The three corpus-throughput targets, judged on the real-weights section when there is one.

    1. ``fp32`` (exact: max abs ≤ 1e-4 against the peer) at ≥ 1.2× the peer's texts/s.
    2. ``bf16`` (min cosine ≥ 0.999 against the peer) at ≥ 2.5× the peer's texts/s.
    3. No regression in the runtime-overhead target (≤ 5 % at B1×T16, every variant timed).
    """
    sections = results.get("throughput") or []
    real = results.get("real_weights")
    judged_on = next((s for s in sections if real is not None and s["directory"] == real["directory"]), None)
    judged_on = judged_on or (sections[0] if sections else None)
    missing = "no corpus-throughput section in this run"

    def criteria(runner: str, speedup: float, accuracy: Criterion) -> list[Criterion]:
        row = _throughput_row(judged_on, runner)
        why = missing if judged_on is None else f"no {runner} variant was timed on the corpus"
        return [
            Criterion(
                f"{runner} texts/s vs the peer",
                None if row is None else row["vs_peer"],
                speedup,
                False,
                "×",
                missing=why,
            ),
            accuracy
            if row is not None
            else Criterion(accuracy.label, None, accuracy.limit, accuracy.at_most, missing=why),
        ]

    exact = _throughput_row(judged_on, EXACT_PATH_VARIANT)
    fast = _throughput_row(judged_on, FAST_PATH_VARIANT)
    rows = [
        _row(
            1,
            f"exact corpus throughput ({EXACT_PATH_VARIANT})",
            f"≥ {THROUGHPUT_EXACT_SPEEDUP_MIN:g}× sentence-transformers (torch) texts/s on the mixed corpus, max abs "
            f"≤ {THROUGHPUT_EXACT_MAX_ABS:g} against it",
            criteria(
                EXACT_PATH_VARIANT,
                THROUGHPUT_EXACT_SPEEDUP_MIN,
                Criterion("max abs vs the peer", exact and exact["max_abs"], THROUGHPUT_EXACT_MAX_ABS, True, fmt=".2g"),
            ),
            [],
        ),
        _row(
            2,
            f"fast corpus throughput ({FAST_PATH_VARIANT})",
            f"≥ {THROUGHPUT_FAST_SPEEDUP_MIN:g}× sentence-transformers (torch) texts/s, min cosine ≥ "
            f"{THROUGHPUT_FAST_MIN_COSINE} against it",
            criteria(
                FAST_PATH_VARIANT,
                THROUGHPUT_FAST_SPEEDUP_MIN,
                Criterion(
                    "min cosine vs the peer", fast and fast["min_cosine"], THROUGHPUT_FAST_MIN_COSINE, False, fmt=".5f"
                ),
            ),
            [],
        ),
        _row(
            3,
            "no regression in the runtime overhead",
            f"tokenize + batch + post-process ≤ {OVERHEAD_PCT_MAX:g}% of end to end at B1×T16, every variant timed",
            _per_variant(results["overhead"], "overhead_pct", "overhead", OVERHEAD_PCT_MAX, at_most=True, unit="%")
            if "overhead" in results
            else [
                Criterion(
                    "runtime overhead",
                    None,
                    OVERHEAD_PCT_MAX,
                    True,
                    "%",
                    missing="this run timed only the corpus-throughput section (--sections throughput)",
                )
            ],
            [
                "B1×T128 latency times bare session.run on the same file, which batching does not touch; "
                "see the latency grid"
            ],
        ),
    ]
    scope = out_of_scope_threads(results)
    if scope is not None:
        for row in rows:
            row.update(status=NOT_MEASURED, status_reason=f"not judged: {scope}")
    return {"judged_on": None if judged_on is None else judged_on["directory"], "rows": rows, "out_of_scope": scope}


def out_of_scope_threads(results: dict[str, Any]) -> str | None:
    """Why this run cannot judge the corpus targets (not 2 threads), or None when it can."""
    budget = results["threads"]["budget"]
    return (
        None
        if budget == TARGET_THREADS
        else f"the targets are stated for {TARGET_THREADS} threads, this run used {budget}"
    )
