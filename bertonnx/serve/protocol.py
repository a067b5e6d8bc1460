"""Request and response bodies of the three protocols the server speaks, as pydantic models.

- Text Embeddings Inference (TEI): ``/embed``, ``/predict``, ``/encode``, ``/tokenize``. Field names and
  defaults are TEI's (``inputs``, ``truncate``, ``normalize`` true, ``raw_scores``); ``pooling`` and the
  ``/encode`` route are ours (TEI has no route for the pooler output or the NSP head).
- OpenAI embeddings: ``/v1/embeddings`` (``input``, ``encoding_format`` float or base64, ``usage``).
- KServe v2 / Triton HTTP: ``/v2/...`` (tensors as ``{"name", "shape", "datatype", "data"}``).

Leaves are strict (``"yes"`` is not a bool, ``5`` is not a string): a wrong type is a 422 naming the field,
never a guess. An unknown field is a 422 naming it (``normalise``: did you mean ``normalize``?), except on
KServe's bodies, whose clients send protocol fields this server does not use; OpenAI's ``user`` and ``model`` are
declared and ignored.
"""

from __future__ import annotations

from typing import Any, Literal

from pydantic import (
    BaseModel,
    ConfigDict,
    Field,
    StrictBool,
    StrictInt,
    StrictStr,
    ValidationError,
    ValidatorFunctionWrapHandler,
    field_validator,
)

from ..tasks.answer import DEFAULT_MAX_ANSWER_LEN
from ..tasks.tag import DEFAULT_IGNORE_LABELS
from ..tasks.zero_shot import DEFAULT_HYPOTHESIS_TEMPLATE

__all__ = [
    "REQUEST_EXAMPLES",
    "EmbedRequest",
    "EncodeRequest",
    "EncodedInput",
    "ErrorResponse",
    "InfoResponse",
    "KServeInferRequest",
    "KServeInferResponse",
    "KServeModelMetadata",
    "KServeOutputRequest",
    "KServeTensor",
    "KServeTensorMetadata",
    "OpenAIEmbedding",
    "OpenAIEmbeddingsRequest",
    "OpenAIEmbeddingsResponse",
    "OpenAIUsage",
    "Pair",
    "PredictRequest",
    "Prediction",
    "TokenizeRequest",
    "Tokens",
]

#: The runtime's ``POOLING_MODES`` (a test checks they agree).
Pooling = Literal["pooler", "cls", "mean", "pipeline"]
#: A sentence pair: ``["sentence A", "sentence B"]`` (segment ids 0 and 1).
Pair = tuple[StrictStr, StrictStr]
#: One input of ``/encode`` and ``/tokenize``: a text or a pair.
TextOrPair = StrictStr | Pair

TRUNCATE_DOC = (
    "cut inputs over the model's 512 tokens (longest sequence first for pairs); absent: the server's "
    "--truncation (default false: such an input is a 422 naming it)"
)

#: A valid body per route: error messages show it so a client sees the expected shape.
REQUEST_EXAMPLES = {
    "/embed": '{"inputs": ["text", ...], "normalize": true, "pooling": "pipeline" | "pooler" | "cls" | "mean", '
    '"truncate": false}',
    "/embed_sparse": '{"inputs": ["text", ...], "truncate": false, "prompt_name": null, "top_k": null}',
    "/predict": '{"inputs": ["sentence A", "sentence B"] or [["A", "B"], ...], "raw_scores": false, "truncate": false}',
    "/encode": '{"inputs": ["text", ["sentence A", "sentence B"], ...], "truncate": false}',
    "/tokenize": '{"inputs": ["text", ["sentence A", "sentence B"], ...], "truncate": false}',
    "/rerank": '{"query": "what is deep learning?", "texts": ["text", ...], "raw_scores": false, "return_text": false}',
    "/fill_mask": '{"inputs": ["the capital of france is [MASK].", ...], "top_k": 5, "truncate": false, '
    '"targets": null}',
    "/tag": '{"inputs": "text" or ["text", ...], "aggregation_strategy": "none" | "simple" | "first" | "average" | '
    '"max", "ignore_labels": ["O"], "stride": null}',
    "/answer": '{"question": "text" or ["text", ...], "context": "text" or ["text", ...], "top_k": 1, '
    '"max_answer_len": 15, "doc_stride": null, "handle_impossible_answer": false}',
    "/choose": '{"context": "text" or ["text", ...], "choices": ["a", "b", ...] or [["a", "b"], ...], '
    '"truncate": false}',
    "/zero_shot": '{"inputs": "text" or ["text", ...], "candidate_labels": ["a", "b", ...] or "a, b", '
    '"hypothesis_template": "This example is {}.", "multi_label": false, "entailment_label": null, "truncate": null}',
    "/detect_replaced": '{"inputs": "text" or ["text", ...], "truncate": false}',
    "/v1/embeddings": '{"input": "text" or ["text", ...], "model": "name", "encoding_format": "float" | "base64"}',
    "infer": '{"inputs": [{"name": "input_ids", "shape": [1, 4], "datatype": "INT64", "data": [101, 7592, 999, 102]},'
    " ... attention_mask, token_type_ids]}",
}


#: What an ``inputs`` field takes: texts; one pair or a list of pairs; texts and pairs.
TEXTS, PAIRS, TEXTS_OR_PAIRS = "texts", "pairs", "texts or pairs"
#: A field that takes a list only (TEI's ``/rerank`` ``texts``): one string is refused as such.
TEXT_LIST = "text list"
_JSON_KINDS = {str: "a string", bool: "a boolean", int: "a number", float: "a number", dict: "an object"}


def _kind(value: object) -> str:
    if value is None:
        return "null"
    if isinstance(value, list):
        return f"an array of {len(value)}"
    return _JSON_KINDS.get(type(value), type(value).__name__)


def _is_pair(value: object) -> bool:
    return isinstance(value, list) and len(value) == 2 and all(isinstance(v, str) for v in value)


def describe_inputs(value: object, accepts: str) -> str:
    """Why ``value`` is not a valid ``inputs`` of a route that takes ``accepts`` (names the first bad item)."""
    if accepts == PAIRS and isinstance(value, list) and all(isinstance(v, str) for v in value):
        return f'must be one pair ["sentence A", "sentence B"] or a list of pairs; got {len(value)} strings'
    if accepts == PAIRS and isinstance(value, list) and value and not any(isinstance(v, list) for v in value):
        # no item is an array: the client meant one pair, so name its bad member, not "item 0 is a string"
        bad = next(index for index, item in enumerate(value) if not isinstance(item, str))
        return (
            f'one pair must be 2 strings ["sentence A", "sentence B"]; got {len(value)} items and item {bad} is '
            f"{_kind(value[bad])}"
        )
    item_ok = {TEXTS: lambda v: isinstance(v, str), TEXT_LIST: lambda v: isinstance(v, str), PAIRS: _is_pair}.get(
        accepts, lambda v: isinstance(v, str) or _is_pair(v)
    )
    item_text = {
        TEXTS: "every input must be a string",
        TEXT_LIST: "every text must be a string",
        PAIRS: 'each pair must be 2 strings ["sentence A", "sentence B"]',
    }.get(accepts, 'each input must be a string or a pair of 2 strings ["sentence A", "sentence B"]')
    if isinstance(value, list):
        for index, item in enumerate(value):
            if not item_ok(item):
                return f"item {index} is {_kind(item)}; {item_text}"
    whole = {
        TEXTS: "a string or a list of strings",
        TEXT_LIST: 'a list of strings (one text is ["text"])',
        PAIRS: 'one pair ["sentence A", "sentence B"] or a list of pairs',
    }
    return f"must be {whole.get(accepts, 'a string or a list of strings and pairs')}; got {_kind(value)}"


def _inputs_check(field: str, accepts: str) -> Any:
    """A validator that replaces pydantic's per-union-member errors by one message naming the bad item."""

    def check(cls: type[BaseModel], value: Any, handler: ValidatorFunctionWrapHandler) -> Any:
        try:
            return handler(value)
        except ValidationError:
            raise ValueError(describe_inputs(value, accepts)) from None

    return field_validator(field, mode="wrap")(classmethod(check))


class Body(BaseModel):
    """A request body: a field the route does not define is a 422 naming it (with the field it may have meant),
    never silently ignored. (KServe's bodies are not: its clients send fields of the protocol we do not use.)"""

    model_config = ConfigDict(extra="forbid")


class ErrorResponse(BaseModel):
    """Every error answer."""

    error: str = Field(description="what is wrong and how to fix it")
    error_type: str = Field(
        description="bad_request | unauthorized | not_found | method_not_allowed | request_timeout | "
        "payload_too_large | uri_too_long | unsupported_media_type | validation | overloaded | headers_too_large | "
        "backend | unavailable | timeout"
    )


# -- TEI ------------------------------------------------------------------------------------------------


class EmbedRequest(Body):
    """``POST /embed``: one vector per text."""

    inputs: StrictStr | list[StrictStr] = Field(description="a text or a list of texts", examples=[["hello world"]])
    truncate: StrictBool | None = Field(default=None, description=TRUNCATE_DOC)
    normalize: StrictBool = Field(default=True, description="scale each vector to unit L2 norm (TEI's default)")
    pooling: Pooling | None = Field(
        default=None,
        description="pipeline (the export's sentence-transformers pipeline), pooler (BERT's trained pooler), cls "
        "([CLS] state) or mean (attended tokens); absent: the server's --pooling, else the export's own",
    )
    prompt_name: StrictStr | None = Field(default=None, description="one of the export's prompts (TEI's)")
    prompt: StrictStr | None = Field(
        default=None, description="a prompt text put before every text (ours, as sentence-transformers' prompt=)"
    )
    dimensions: StrictInt | None = Field(default=None, description="keep the first dimensions values (Matryoshka)")

    check_inputs = _inputs_check("inputs", TEXTS)


class EmbedSparseRequest(Body):
    """``POST /embed_sparse`` (TEI's): one SPLADE vector per text, as its non-zero ``{"index", "value"}`` pairs."""

    inputs: StrictStr | list[StrictStr] = Field(description="a text or a list of texts", examples=[["hello world"]])
    truncate: StrictBool | None = Field(default=None, description=TRUNCATE_DOC)
    prompt_name: StrictStr | None = Field(default=None, description="one of the export's prompts (TEI's)")
    prompt: StrictStr | None = Field(
        default=None, description="a prompt text put before every text (ours, as sentence-transformers' prompt=)"
    )
    top_k: StrictInt | None = Field(default=None, ge=1, description="keep the top_k largest weights (ours)")

    check_inputs = _inputs_check("inputs", TEXTS)


class SparseValue(BaseModel):
    index: int = Field(description="the vocabulary id")
    value: float = Field(description="its SPLADE weight")


class PredictRequest(Body):
    """``POST /predict``: next-sentence prediction for one pair or a list of pairs."""

    inputs: Pair | list[Pair] = Field(
        description='one pair ["sentence A", "sentence B"] or a list of pairs', examples=[["the sky is blue", "it is"]]
    )
    truncate: StrictBool | None = Field(default=None, description=TRUNCATE_DOC)
    raw_scores: StrictBool = Field(default=False, description="logits instead of softmax probabilities")

    check_inputs = _inputs_check("inputs", PAIRS)


class Prediction(BaseModel):
    label: Literal["is_next", "not_next"]
    score: float = Field(description="softmax probability, or the logit with raw_scores")


class EncodeRequest(Body):
    """``POST /encode``: every graph output of each text or pair."""

    inputs: StrictStr | list[TextOrPair] = Field(
        description='a text, or a list of texts and pairs ["sentence A", "sentence B"]',
        examples=[["hello world", ["the sky is blue", "it is"]]],
    )
    truncate: StrictBool | None = Field(default=None, description=TRUNCATE_DOC)

    check_inputs = _inputs_check("inputs", TEXTS_OR_PAIRS)


class EncodedInput(BaseModel):
    tokens: list[str]
    ids: list[int]
    type_ids: list[int]
    last_hidden_state: list[list[float]] = Field(description="[tokens, hidden]: this input's tokens, no padding")
    pooler_output: list[float] = Field(description="[hidden]")
    nsp_logits: list[float] = Field(description="[2]: index 0 is 'B follows A'")


class TokenizeRequest(EncodeRequest):
    """``POST /tokenize``: tokens and ids exactly as the model is fed, as ``bertonnx tokenize``."""


class Tokens(BaseModel):
    tokens: list[str]
    ids: list[int]
    type_ids: list[int]
    attention_mask: list[int]


# -- the heads' own routes (TEI's /predict on a classifier, /rerank; ours: /fill_mask, /tag, /answer, /choose) --


class TextPredictRequest(Body):
    """``POST /predict`` on a classifier export: one text or pair, or a list of texts and pairs."""

    inputs: StrictStr | Pair | list[TextOrPair] = Field(
        description='a text, one pair ["sentence A", "sentence B"], or a list of texts and pairs',
        examples=[["i loved this film", "the food was cold"]],
    )
    truncate: StrictBool | None = Field(default=None, description=TRUNCATE_DOC)
    raw_scores: StrictBool = Field(default=False, description="logits instead of the head's probabilities")

    check_inputs = _inputs_check("inputs", TEXTS_OR_PAIRS)

    @field_validator("inputs", mode="before")
    @classmethod
    def bare_pair(cls, value: Any) -> Any:
        """A bare ``["A", "B"]`` is one pair (TEI's rule, and offline ``classify("A", "B")``), not two texts."""
        return tuple(value) if _is_pair(value) else value


class LabelPrediction(BaseModel):
    label: str
    score: float = Field(description="softmax / sigmoid probability (as the checkpoint's head), or the logit")


class RerankRequest(Body):
    """``POST /rerank`` (TEI's): score ``query`` against each text with a cross-encoder."""

    query: StrictStr = Field(examples=["what is deep learning?"])
    texts: list[StrictStr] = Field(examples=[["deep learning is a kind of machine learning", "cheese"]])
    truncate: StrictBool | None = Field(default=None, description=TRUNCATE_DOC)
    raw_scores: StrictBool = Field(default=False, description="the logit instead of its sigmoid")
    return_text: StrictBool = Field(default=False, description="add each text to its result")

    check_texts = _inputs_check("texts", TEXT_LIST)


class Rank(BaseModel):
    index: int
    score: float
    text: str | None = None


class FillMaskRequest(Body):
    """``POST /fill_mask``: the MLM head's top tokens for each ``[MASK]`` of each text."""

    inputs: StrictStr | list[StrictStr] = Field(examples=[["the capital of france is [MASK]."]])
    top_k: StrictInt = Field(default=5, ge=1, le=100, description="candidates per [MASK]")
    truncate: StrictBool | None = Field(default=None, description=TRUNCATE_DOC)
    targets: StrictStr | list[StrictStr] | None = Field(
        default=None, description="only these tokens as candidates, as the fill-mask pipeline's targets"
    )

    check_inputs = _inputs_check("inputs", TEXTS)


class MaskCandidate(BaseModel):
    score: float
    token: int
    token_str: str
    sequence: str


class TagRequest(Body):
    """``POST /tag``: the entities of each text (token classification)."""

    inputs: StrictStr | list[StrictStr] = Field(
        description="a text or a list of texts", examples=["Angela Merkel met Emmanuel Macron in Paris."]
    )
    aggregation_strategy: Literal["none", "simple", "first", "average", "max"] = Field(
        default="simple",
        description="none: every token; simple: adjacent B-/I- tags grouped; first/average/max: one label per "
        "word (its first piece's, its pieces' mean scores', its most confident piece's), then grouped",
    )
    ignore_labels: list[StrictStr] = Field(
        default=list(DEFAULT_IGNORE_LABELS), description="labels left out; [] keeps every token or group"
    )
    stride: StrictInt | None = Field(
        default=None,
        ge=0,
        description="tag texts over the model's 512 tokens in windows sharing this many tokens (not with 'none'); "
        "absent: such a text is a 422",
    )


class TokenEntity(BaseModel):
    """One token (``aggregation_strategy: none``)."""

    entity: str = Field(description="the token's label, e.g. B-PER")
    score: float = Field(description="its softmax probability")
    index: int = Field(description="the token's position in the tokenized text ([CLS] is 0)")
    word: str = Field(description="the token as the vocabulary spells it (## for a continuation)")
    start: int = Field(description="character offset of its first character in the text")
    end: int = Field(description="character offset after its last character")


class EntityGroup(BaseModel):
    """One entity (every other strategy): adjacent tokens or words sharing a tag."""

    entity_group: str = Field(description="the tag, B-/I- prefix removed, e.g. PER")
    score: float = Field(description="mean probability of its tokens or words")
    word: str = Field(description="its tokens decoded (lower-cased by an uncased model)")
    start: int = Field(description="character offset of its first character in the text")
    end: int = Field(description="character offset after its last character: text[start:end] is the entity")


class DetectReplacedRequest(Body):
    """``POST /detect_replaced``: per token of each text, the probability it was replaced (ELECTRA)."""

    inputs: StrictStr | list[StrictStr] = Field(
        description="a text or a list of texts", examples=["the chef cooked the meal"]
    )
    truncate: StrictBool | None = Field(default=None, description=TRUNCATE_DOC)

    check_inputs = _inputs_check("inputs", TEXTS)


class ReplacedTokenAnswer(BaseModel):
    """One token of a text and the probability that it was replaced (special tokens are left out)."""

    index: int = Field(description="the token's position in the tokenized text (the first special token is 0)")
    token: str = Field(description="the token as the vocabulary spells it")
    start: int = Field(description="character offset of its first character in the text")
    end: int = Field(description="character offset after its last character: text[start:end] is the token")
    score: float = Field(description="P(replaced): the sigmoid of the discriminator's logit")


class AnswerRequest(Body):
    """``POST /answer``: extractive answers to questions in contexts."""

    question: StrictStr | list[StrictStr] = Field(description="a question or a list of questions")
    context: StrictStr | list[StrictStr] = Field(
        description="the context of every question, or one context per question; any length (windowed)"
    )
    top_k: StrictInt = Field(default=1, ge=1, description="answers per question (a list when > 1)")
    max_answer_len: StrictInt = Field(default=DEFAULT_MAX_ANSWER_LEN, ge=1, description="longest answer in tokens")
    doc_stride: StrictInt | None = Field(
        default=None,
        ge=0,
        description="context tokens shared by consecutive windows; absent: min(max_seq_len // 2, 128), as the pipeline",
    )
    handle_impossible_answer: StrictBool = Field(
        default=False, description='also offer the empty answer {"start": 0, "end": 0, "answer": ""}'
    )
    max_seq_len: StrictInt | None = Field(default=None, description="tokens per window; absent: 384")
    truncate: StrictBool | None = Field(default=None, description="meaningless here (nothing is cut); true is a 422")


class AnswerSpan(BaseModel):
    score: float = Field(description="P(start) x P(end) in its window, summed over windows finding the same text")
    start: int = Field(description="character offset of the answer in the context")
    end: int = Field(description="character offset after it: context[start:end] == answer")
    answer: str


class ChooseRequest(Body):
    """``POST /choose``: the best of several choices for each context (a multiple-choice head)."""

    context: StrictStr | list[StrictStr] = Field(
        description="a context (question, sentence start), or a list of them", examples=["The cat sat on the"]
    )
    choices: list[StrictStr] | list[list[StrictStr]] = Field(
        description="its choices (at least 2), or per context its list of choices", examples=[["mat", "moon"]]
    )
    truncate: StrictBool | None = Field(default=None, description=TRUNCATE_DOC)


class ChoiceAnswer(BaseModel):
    index: int = Field(description="the best choice's position")
    choice: str = Field(description="the best choice")
    score: float = Field(description="its softmax probability over the choices")
    scores: list[float] = Field(description="every choice's probability, in the choices' order")


class ZeroShotRequest(Body):
    """``POST /zero_shot``: zero-shot classification by an NLI classifier (``pipeline("zero-shot-classification")``)."""

    inputs: StrictStr | list[StrictStr] = Field(description="a text, or a list of texts", examples=["my phone broke"])
    candidate_labels: StrictStr | list[StrictStr] = Field(
        description="the labels: a list, or one comma-separated string", examples=[["urgent", "phone", "tablet"]]
    )
    hypothesis_template: StrictStr = Field(
        default=DEFAULT_HYPOTHESIS_TEMPLATE, description="the hypothesis, with {} where the label goes"
    )
    multi_label: StrictBool = Field(default=False, description="score each label on its own")
    entailment_label: StrictStr | None = Field(
        default=None, description="the label meaning entailment (absent: the first starting with 'entail')"
    )
    truncate: StrictBool | None = Field(
        default=None,
        description="cut a text too long beside a hypothesis (the text only); absent: cut, as the pipeline",
    )

    check_inputs = _inputs_check("inputs", TEXTS)


class ZeroShotResult(BaseModel):
    sequence: str = Field(description="the text")
    labels: list[str] = Field(description="the candidate labels, highest score first")
    scores: list[float] = Field(description="their probabilities, in the same order")


# -- OpenAI ---------------------------------------------------------------------------------------------


class OpenAIEmbeddingsRequest(Body):
    """``POST /v1/embeddings``, OpenAI's embeddings API. Vectors are unit length (as OpenAI's and TEI's)."""

    input: StrictStr | list[StrictStr] = Field(description="a text or a list of texts (token arrays are not taken)")
    model: StrictStr | None = Field(default=None, description="ignored: this server serves one model")
    encoding_format: Literal["float", "base64"] = Field(
        default="float", description="base64: little-endian float32 bytes (the openai client's default)"
    )
    dimensions: StrictInt | None = Field(
        default=None, description="keep the first dimensions values, then scale to unit length (Matryoshka)"
    )
    user: StrictStr | None = None
    truncate: StrictBool | None = Field(
        default=None, description="cut inputs over 512 tokens (TEI's extension; absent: the server's --truncation)"
    )

    check_input = _inputs_check("input", TEXTS)


class OpenAIEmbedding(BaseModel):
    object: Literal["embedding"] = "embedding"
    embedding: list[float] | str
    index: int


class OpenAIUsage(BaseModel):
    prompt_tokens: int
    total_tokens: int


class OpenAIEmbeddingsResponse(BaseModel):
    object: Literal["list"] = "list"
    data: list[OpenAIEmbedding]
    model: str
    usage: OpenAIUsage


# -- KServe v2 ------------------------------------------------------------------------------------------


class KServeTensor(BaseModel):
    """One input tensor: row-major ``data`` (nested or flat), or ``parameters.binary_data_size`` bytes
    after the JSON header (the binary tensor data extension)."""

    name: StrictStr
    shape: list[StrictInt]
    datatype: StrictStr
    data: list[Any] | None = None
    parameters: dict[str, Any] | None = None


class KServeOutputRequest(BaseModel):
    name: StrictStr
    parameters: dict[str, Any] | None = None


class KServeInferRequest(BaseModel):
    id: StrictStr | None = None
    inputs: list[KServeTensor]
    outputs: list[KServeOutputRequest] | None = None
    parameters: dict[str, Any] | None = None


class KServeOutputTensor(BaseModel):
    name: str
    shape: list[int]
    datatype: str
    data: list[float] | None = None
    parameters: dict[str, Any] | None = None


class KServeInferResponse(BaseModel):
    model_name: str
    model_version: str | None = None
    id: str | None = None
    outputs: list[KServeOutputTensor]


class KServeTensorMetadata(BaseModel):
    name: str
    datatype: str
    shape: list[int] = Field(description="-1 for a dynamic dimension")


class KServeModelMetadata(BaseModel):
    name: str
    versions: list[str]
    platform: str
    inputs: list[KServeTensorMetadata]
    outputs: list[KServeTensorMetadata]


# -- server ---------------------------------------------------------------------------------------------


class InfoResponse(BaseModel):
    model_name: str
    model_dir: str
    source: Any
    variant: str
    engine: str
    precision: str
    random_weights: bool
    task: dict[str, Any] = Field(description="architecture, tasks, heads, num_labels, labels, problem_type")
    hidden_size: int
    max_input_length: int
    pooling: str
    threads: int
    memory: dict[str, bool]
    limits: dict[str, Any]
    versions: dict[str, str | None]
