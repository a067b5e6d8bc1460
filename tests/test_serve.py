"""``bertonnx serve`` as users run it: a separate process on a free loopback port, driven by httpx, the
official ``openai`` client and ``tritonclient.http``, every answer checked against offline ``BertOnnx``.

Servers (each started once per module, on the tiny export, with one intra-op thread):
- ``server``: default options (the parity, error and concurrency tests);
- ``tight``: an API key, a 20 kB payload limit, 4 inputs per request, 300 ms batch wait (auth, 413 and
  cross-request batching);
- ``held``: a 5 s batch wait, a 2 s request timeout and a 4-input queue, so inputs sit in the queue long
  enough to test 429, 504 and client disconnects deterministically (nothing is ever computed there);
- one server per SIGTERM test.
Every wait below is bounded; servers bind 127.0.0.1 only.
"""

from __future__ import annotations

import asyncio
import base64
import json
import shutil
import signal
import socket
import subprocess
import sys
import threading
import time
from collections.abc import Callable, Iterator
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

import httpx
import numpy as np
import pytest
from prometheus_client.parser import text_string_to_metric_families

from bertonnx import BertOnnx

from .conftest import ROOT

ATOL = 1e-5
READY_TIMEOUT_S = 60
HOST = "127.0.0.1"
TEXTS = [
    "hello world",
    "The weather is nice today, and I would like to go for a long walk in the park.",
    "a",
    "Ünïcödé text with digits 12345, accents and CJK 汉字.",
    " ".join(["a longer input"] * 60),
]
PAIRS = [
    ("the weather is nice", "i agree with you"),
    ("short", "a much longer second sentence, with several more words in it"),
    ("One.", "Two."),
]
LONG_TEXT = "word " * 600  # 602 tokens


# -- the server process ---------------------------------------------------------------------------------


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind((HOST, 0))
        return int(sock.getsockname()[1])


class Server:
    """A ``bertonnx serve`` process; ``url`` once /ready answers 200."""

    def __init__(self, model_dir: Path, log: Path, *args: str) -> None:
        self.port = free_port()
        self.url = f"http://{HOST}:{self.port}"
        self.log = log
        command = [sys.executable, "-m", "bertonnx.cli", "serve", str(model_dir), "--port", str(self.port)]
        with open(log, "wb") as out:
            self.process = subprocess.Popen(
                [*command, "--threads", "1", *args], stdout=out, stderr=subprocess.STDOUT, cwd=ROOT
            )
        deadline = time.monotonic() + READY_TIMEOUT_S
        while time.monotonic() < deadline:
            if self.process.poll() is not None:
                pytest.fail(f"the server exited with {self.process.returncode}:\n{log.read_text()}")
            try:
                if httpx.get(f"{self.url}/ready", timeout=2).status_code == 200:
                    return
            except httpx.TransportError:
                pass
            time.sleep(0.1)
        self.stop()
        pytest.fail(f"the server was not ready within {READY_TIMEOUT_S} s:\n{log.read_text()}")

    def client(self, **kwargs: Any) -> httpx.Client:
        return httpx.Client(base_url=self.url, timeout=30, **kwargs)

    def metric(self, name: str, **labels: str) -> float:
        """The value of one sample of /metrics (0 when absent; /metrics needs no API key)."""
        text = httpx.get(f"{self.url}/metrics", timeout=10).text
        for family in text_string_to_metric_families(text):
            for sample in family.samples:
                if sample.name == name and all(sample.labels.get(k) == v for k, v in labels.items()):
                    return float(sample.value)
        return 0.0

    def wait_for(self, condition: Callable[[], bool], what: str, timeout: float = 10) -> None:
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if condition():
                return
            time.sleep(0.02)
        pytest.fail(f"timed out after {timeout} s waiting for {what}:\n{self.log.read_text()[-3000:]}")

    def stop(self) -> int:
        if self.process.poll() is None:
            self.process.send_signal(signal.SIGTERM)
            try:
                self.process.wait(timeout=30)
            except subprocess.TimeoutExpired:
                self.process.kill()
                self.process.wait(timeout=10)
        return self.process.returncode


def start(tmp_path_factory: pytest.TempPathFactory, model_dir: Path, *args: str) -> Iterator[Server]:
    server = Server(model_dir, tmp_path_factory.mktemp("serve") / "server.log", *args)
    try:
        yield server
    finally:
        server.stop()


@pytest.fixture(scope="module")
def server(tmp_path_factory: pytest.TempPathFactory, tiny_export: Path) -> Iterator[Server]:
    yield from start(tmp_path_factory, tiny_export)


@pytest.fixture(scope="module")
def tight(tmp_path_factory: pytest.TempPathFactory, tiny_export: Path) -> Iterator[Server]:
    yield from start(
        tmp_path_factory,
        tiny_export,
        "--api-key",
        "s3cret",
        "--payload-limit",
        "20000",
        "--max-client-batch-size",
        "4",
        "--batch-wait-ms",
        "300",
    )


@pytest.fixture(scope="module")
def held(tmp_path_factory: pytest.TempPathFactory, tiny_export: Path) -> Iterator[Server]:
    yield from start(
        tmp_path_factory,
        tiny_export,
        "--batch-wait-ms",
        "5000",
        "--request-timeout",
        "2",
        "--max-queue",
        "4",
        "--max-client-batch-size",
        "4",
    )


@pytest.fixture(scope="module")
def model(tiny_export: Path) -> BertOnnx:
    return BertOnnx(tiny_export)


def close(actual: Any, expected: Any) -> None:
    np.testing.assert_allclose(np.asarray(actual, dtype=np.float32), expected, atol=ATOL, rtol=0)


def check_error(response: httpx.Response, status: int, error_type: str, match: str) -> dict[str, Any]:
    """TEI's error shape, or OpenAI's on /v1/ routes (which the openai client reads)."""
    assert response.status_code == status, response.text
    body = response.json()
    if response.request.url.path.startswith("/v1/"):
        assert set(body) == {"error"}, body
        assert set(body["error"]) == {"message", "type", "param", "code"}, body
        body = {"error": body["error"]["message"], "error_type": body["error"]["type"]}
    assert set(body) == {"error", "error_type"}, body
    assert body["error_type"] == error_type, body
    assert match in body["error"], body
    return body


# -- every route against offline BertOnnx ---------------------------------------------------------------


def test_embed_matches_offline_for_every_pooling(server: Server, model: BertOnnx) -> None:
    with server.client() as client:
        for pooling in ("pooler", "cls", "mean"):
            for normalize in (True, False):
                body = {"inputs": TEXTS, "pooling": pooling, "normalize": normalize}
                response = client.post("/embed", json=body)
                assert response.status_code == 200, response.text
                close(response.json(), model.embed(TEXTS, pooling, normalize=normalize))
        single = client.post("/embed", json={"inputs": "hello world"}).json()  # TEI: normalize by default
        close(single, model.embed(["hello world"], "pooler", normalize=True))


def test_predict_matches_offline_nsp(server: Server, model: BertOnnx) -> None:
    firsts, seconds = [a for a, _ in PAIRS], [b for _, b in PAIRS]
    probabilities = model.nsp(firsts, seconds)
    logits = model(firsts, seconds, hidden_states=False).nsp_logits
    with server.client() as client:
        batch = client.post("/predict", json={"inputs": [list(p) for p in PAIRS]}).json()
        raw = client.post("/predict", json={"inputs": [list(p) for p in PAIRS], "raw_scores": True}).json()
        one = client.post("/predict", json={"inputs": list(PAIRS[0])}).json()
    assert len(batch) == len(PAIRS)
    for i, predictions in enumerate(batch):
        assert [p["label"] for p in predictions] in (["is_next", "not_next"], ["not_next", "is_next"])
        assert predictions[0]["score"] >= predictions[1]["score"]
        scores = {p["label"]: p["score"] for p in predictions}
        close(scores["is_next"], probabilities[i])
        close(scores["is_next"] + scores["not_next"], 1.0)
        raw_scores = {p["label"]: p["score"] for p in raw[i]}
        close([raw_scores["is_next"], raw_scores["not_next"]], logits[i])
    assert one == batch[0]  # one pair in: one list of predictions out (TEI's shape)


def test_encode_gives_every_graph_output_per_text_or_pair(server: Server, model: BertOnnx) -> None:
    items: list[Any] = [TEXTS[0], list(PAIRS[0]), TEXTS[3], list(PAIRS[1])]
    with server.client() as client:
        answers = client.post("/encode", json={"inputs": items}).json()
    assert len(answers) == len(items)
    for item, answer in zip(items, answers, strict=True):
        text, pair = (item, None) if isinstance(item, str) else item
        tokens = model.tokenize(text, pair)
        assert answer["tokens"] == tokens.tokens
        assert answer["ids"] == tokens.ids
        assert answer["type_ids"] == tokens.type_ids
        offline = model([text], None if pair is None else [pair])
        close(answer["last_hidden_state"], offline.token_states(0))
        close(answer["pooler_output"], offline.pooler_output[0])
        close(answer["nsp_logits"], offline.nsp_logits[0])


def test_tokenize_matches_bertonnx_tokenize(server: Server, model: BertOnnx) -> None:
    with server.client() as client:
        answers = client.post("/tokenize", json={"inputs": [TEXTS[3], list(PAIRS[0])]}).json()
        cut = client.post("/tokenize", json={"inputs": LONG_TEXT, "truncate": True}).json()
    expected = [model.tokenize(TEXTS[3]), model.tokenize(*PAIRS[0])]
    for answer, tokens in zip(answers, expected, strict=True):
        assert answer == {
            "tokens": tokens.tokens,
            "ids": tokens.ids,
            "type_ids": tokens.type_ids,
            "attention_mask": tokens.attention_mask,
        }
    assert len(cut[0]["ids"]) == 512
    assert cut[0]["tokens"][-1] == "[SEP]"


def test_openai_client_works_unchanged(server: Server, model: BertOnnx) -> None:
    import openai

    client = openai.OpenAI(base_url=f"{server.url}/v1", api_key="unused", max_retries=0, timeout=30)
    expected = model.embed(TEXTS, "pooler", normalize=True)
    default = client.embeddings.create(model="tiny", input=TEXTS)  # the client asks for base64 by default
    floats = client.embeddings.create(model="tiny", input=TEXTS, encoding_format="float")
    for result in (default, floats):
        assert [d.index for d in result.data] == list(range(len(TEXTS)))
        close([d.embedding for d in result.data], expected)
        assert result.usage.prompt_tokens == sum(len(model.tokenize(t)) for t in TEXTS)
        assert result.model == server_model_name(server)
    one = client.embeddings.create(model="tiny", input="hello world")
    close(one.data[0].embedding, expected[0])
    with server.client() as http:
        raw = http.post("/v1/embeddings", json={"input": ["a"], "encoding_format": "base64"}).json()
    decoded = np.frombuffer(base64.b64decode(raw["data"][0]["embedding"]), dtype="<f4")
    close(decoded, model.embed(["a"], normalize=True)[0])


def server_model_name(server: Server) -> str:
    return str(httpx.get(f"{server.url}/info", timeout=10).json()["model_name"])


def test_tritonclient_works_unchanged_with_binary_and_json_tensors(server: Server, model: BertOnnx) -> None:
    import tritonclient.http as triton

    name = server_model_name(server)
    client = triton.InferenceServerClient(f"{HOST}:{server.port}", connection_timeout=30, network_timeout=30)
    try:
        assert client.is_server_live()
        assert client.is_server_ready()
        assert client.is_model_ready(name)
        metadata = client.get_model_metadata(name)
        assert [i["name"] for i in metadata["inputs"]] == ["input_ids", "attention_mask", "token_type_ids"]
        assert metadata["inputs"][0] == {"name": "input_ids", "datatype": "INT64", "shape": [-1, -1]}
        assert {o["name"]: o["shape"] for o in metadata["outputs"]} == {
            "last_hidden_state": [-1, -1, model.hidden_size],
            "pooler_output": [-1, model.hidden_size],
            "nsp_logits": [-1, 2],
        }
        firsts = [TEXTS[0], TEXTS[1], PAIRS[1][0]]
        seconds = [PAIRS[0][0], PAIRS[0][1], PAIRS[1][1]]
        encodings = model.encode(firsts, seconds)
        width = max(len(e.ids) for e in encodings) + 3  # extra padding the server must ignore
        arrays = {n: np.zeros((len(encodings), width), dtype=np.int64) for n in ("ids", "mask", "types")}
        for row, encoding in enumerate(encodings):
            arrays["ids"][row, : len(encoding.ids)] = encoding.ids
            arrays["mask"][row, : len(encoding.ids)] = 1
            arrays["types"][row, : len(encoding.ids)] = encoding.type_ids
        inputs = []
        for tensor_name, key in (("input_ids", "ids"), ("attention_mask", "mask"), ("token_type_ids", "types")):
            tensor = triton.InferInput(tensor_name, list(arrays[key].shape), "INT64")
            tensor.set_data_from_numpy(arrays[key])  # binary by default, as users run it
            inputs.append(tensor)
        offline = model(firsts, seconds)
        expected_states = np.zeros((len(encodings), width, model.hidden_size), dtype=np.float32)
        assert offline.last_hidden_state is not None
        expected_states[:, : offline.last_hidden_state.shape[1]] = offline.last_hidden_state
        result = client.infer(name, inputs)  # no outputs named: all three, binary
        close(result.as_numpy("last_hidden_state"), expected_states)
        close(result.as_numpy("pooler_output"), offline.pooler_output)
        close(result.as_numpy("nsp_logits"), offline.nsp_logits)
        as_json = client.infer(name, inputs, outputs=[triton.InferRequestedOutput("nsp_logits", binary_data=False)])
        close(as_json.as_numpy("nsp_logits"), offline.nsp_logits)
        assert as_json.as_numpy("pooler_output") is None
        for tensor, key in zip(inputs, ("ids", "mask", "types"), strict=True):
            tensor.set_data_from_numpy(arrays[key], binary_data=False)
        json_in = client.infer(name, inputs, outputs=[triton.InferRequestedOutput("pooler_output")])
        close(json_in.as_numpy("pooler_output"), offline.pooler_output)
        gzipped = client.infer(name, inputs, request_compression_algorithm="gzip")
        close(gzipped.as_numpy("nsp_logits"), offline.nsp_logits)
        with pytest.raises(triton.InferenceServerException, match="missing inputs attention_mask, token_type_ids"):
            client.infer(name, inputs[:1])
    finally:
        client.close()


def test_kserve_json_body_and_errors(server: Server, model: BertOnnx) -> None:
    name = server_model_name(server)
    ids = model.tokenize("hello world").ids

    def tensors(**overrides: Any) -> list[dict[str, Any]]:
        base = {"input_ids": ids, "attention_mask": [1] * len(ids), "token_type_ids": [0] * len(ids)}
        base.update(overrides)
        return [{"name": n, "shape": [1, len(ids)], "datatype": "INT64", "data": d} for n, d in base.items()]

    with server.client() as client:
        answer = client.post(f"/v2/models/{name}/infer", json={"id": "42", "inputs": tensors()})
        assert answer.status_code == 200, answer.text
        body = answer.json()
        assert body["id"] == "42"
        assert body["model_name"] == name
        outputs = {o["name"]: o for o in body["outputs"]}
        pooled = np.reshape(outputs["pooler_output"]["data"], outputs["pooler_output"]["shape"])
        close(pooled, model(["hello world"]).pooler_output)
        versioned = client.post(f"/v2/models/{name}/versions/1/infer", json={"inputs": tensors()})
        assert versioned.status_code == 200
        check_error(client.post("/v2/models/other/infer", json={"inputs": tensors()}), 404, "not_found", "'other'")
        bad_ids = tensors(input_ids=[101, 10**9, 102, 102][: len(ids)])
        check_error(client.post(f"/v2/models/{name}/infer", json={"inputs": bad_ids}), 422, "validation", "outside")
        left_padded = tensors(attention_mask=[0] + [1] * (len(ids) - 1))
        check_error(
            client.post(f"/v2/models/{name}/infer", json={"inputs": left_padded}), 422, "validation", "ones then zeros"
        )
        float_data = tensors(token_type_ids=[0.5] * len(ids))
        check_error(client.post(f"/v2/models/{name}/infer", json={"inputs": float_data}), 422, "validation", "integers")
        wrong_type = [{**t, "datatype": "FP32"} if t["name"] == "input_ids" else t for t in tensors()]
        check_error(client.post(f"/v2/models/{name}/infer", json={"inputs": wrong_type}), 422, "validation", "INT64")


def test_server_routes(server: Server, model: BertOnnx) -> None:
    with server.client() as client:
        assert client.get("/health").json() == {"status": "ok"}
        assert client.get("/ready").json() == {"status": "ready"}
        assert client.get("/v2/health/live").status_code == 200
        info = client.get("/info").json()
        assert info["engine"] == "onnxruntime"
        assert info["variant"] == "fp32"
        assert info["precision"] == "f32"
        assert info["random_weights"] is False
        assert info["hidden_size"] == model.hidden_size
        assert info["limits"]["max_batch_tokens"] == 512
        assert info["limits"]["payload_limit"] == 2_000_000
        assert info["limits"]["max_queue_wait"] == 15.0
        assert info["limits"]["max_batch_requests"] is None
        assert info["limits"]["truncation"] is False  # ServeOptions.truncation (the flag: --truncation)
        # the server's memory default: the arena shrinks and free pages go back to the system after each run
        assert info["memory"] == {"arena_shrinkage": True, "release_memory": True}
        assert info["versions"]["bertonnx"]
        assert info["versions"]["onnxruntime"]
        assert "bertonnx_batch_padded_tokens_bucket" in client.get("/metrics").text
        assert client.get("/metrics").headers["content-type"].startswith("text/plain")
        assert client.get("/docs").status_code == 200
        assert "/v1/embeddings" in client.get("/openapi.json").json()["paths"]
    assert server.metric("bertonnx_requests_total", route="/embed", status="200") >= 1


# -- errors, by status and body -------------------------------------------------------------------------


def test_422_names_the_problem(server: Server) -> None:
    with server.client() as client:
        malformed = client.post("/embed", content=b'{"inputs": [', headers={"content-type": "application/json"})
        check_error(malformed, 422, "validation", "malformed JSON")
        check_error(client.post("/embed", json={"inputs": ["a", 5]}), 422, "validation", "item 1 is a number")
        check_error(client.post("/embed", json={"inputs": "a", "normalize": "yes"}), 422, "validation", "normalize")
        check_error(client.post("/embed", json={"inputs": []}), 422, "validation", "inputs is empty")
        check_error(client.post("/embed", json={}), 422, "validation", "inputs: Field required")
        too_long = client.post("/embed", json={"inputs": ["short", LONG_TEXT]})
        check_error(too_long, 422, "validation", "input 1 has 602 tokens")
        assert '"truncate": true' in too_long.json()["error"]
        check_error(client.post("/embed", json={"inputs": "a", "pooling": "max"}), 422, "validation", "pooling")
        pair = client.post("/predict", json={"inputs": [["a", "b"], ["c", "d", "e"]]})
        check_error(pair, 422, "validation", "item 1 is an array of 3")
        check_error(client.post("/predict", json={"inputs": "a"}), 422, "validation", "one pair")
        # one pair with a bad member names that member (not "item 0 is a string")
        check_error(client.post("/predict", json={"inputs": ["a", 1]}), 422, "validation", "item 1 is a number")
        null_member = client.post("/predict", json={"inputs": ["a", None]})
        check_error(null_member, 422, "validation", "2 items and item 1 is null")
        long_pair = client.post("/predict", json={"inputs": ["a", LONG_TEXT]})
        check_error(long_pair, 422, "validation", "input 0 has 604 tokens")
        mixed = client.post("/encode", json={"inputs": ["a", ["b", "c"], LONG_TEXT]})
        check_error(mixed, 422, "validation", "input 2 has 602 tokens")  # the index in the request
        dims = client.post("/v1/embeddings", json={"input": "a", "dimensions": 100_000})
        check_error(dims, 422, "validation", "dimensions must be between 1 and")
        cut = client.post("/v1/embeddings", json={"input": "a", "dimensions": 7}).json()["data"][0]["embedding"]
        assert len(cut) == 7
        assert abs(sum(v * v for v in cut) - 1) < 1e-5
        assert client.post("/embed", json={"inputs": LONG_TEXT, "truncate": True}).status_code == 200
        check_error(client.get("/nope"), 404, "not_found", "no route GET /nope")
        wrong_method = check_error(client.delete("/embed"), 405, "method_not_allowed", "DELETE")
        assert "allowed: POST" in wrong_method["error"]
        assert client.delete("/embed").headers["allow"] == "POST"
        check_error(client.post("/embed/", json={"inputs": "a"}), 404, "not_found", "/embed/")  # no bodiless 307
        for path in ("/health", "/ready", "/v2/health/live", "/v2/health/ready"):
            assert client.head(path).status_code == 200, path  # HEAD-based health checkers
        # a form-encoded body (curl -d without -H) is told which Content-Type to send
        form = client.post(
            "/embed", content=b'{"inputs": "a"}', headers={"content-type": "application/x-www-form-urlencoded"}
        )
        check_error(form, 422, "validation", "send Content-Type: application/json")
        for body in (b'{"inputs": "caf\xe9"}', b"[" * 100_000):  # latin-1 bytes; nesting past the parser
            undecodable = client.post("/embed", content=body, headers={"content-type": "application/json"})
            check_error(undecodable, 422, "validation", "could not be read as JSON")
        # the over-length message gives the HTTP fix, not the Python one
        assert "truncation=True" not in too_long.json()["error"]
        # OpenAI's route takes truncate too (its over-length error says to send it)
        long_openai = client.post("/v1/embeddings", json={"input": LONG_TEXT})
        check_error(long_openai, 422, "validation", '"truncate": true')
        assert client.post("/v1/embeddings", json={"input": LONG_TEXT, "truncate": True}).status_code == 200


def test_openai_client_reads_the_error_message(server: Server) -> None:
    openai = pytest.importorskip("openai")
    client = openai.OpenAI(base_url=f"{server.url}/v1", api_key="unused", max_retries=0)
    with pytest.raises(openai.UnprocessableEntityError, match="dimensions must be between 1 and"):
        client.embeddings.create(model="m", input=["a"], dimensions=100_000)


def test_kserve_bad_binary_header_and_nesting_are_422(server: Server) -> None:
    ids = {"name": "input_ids", "datatype": "INT64", "shape": [2, 3], "data": [[101, 2000, 102], [101, 2001, 102]]}
    name = server_model_name(server)
    with server.client() as client:
        # a non-ASCII digit is not a length (str.isdigit() says yes to '²', int() says no)
        odd = client.post(
            f"/v2/models/{name}/infer",
            content=json.dumps({"inputs": [ids]}).encode(),
            headers={"Inference-Header-Content-Length": b"\xb2"},
        )
        check_error(odd, 422, "validation", "Inference-Header-Content-Length")
        nested = {**ids, "shape": [3, 2]}  # 6 values, nested as 2 x 3
        check_error(
            client.post(f"/v2/models/{name}/infer", json={"inputs": [nested]}), 422, "validation", "nested as [2, 3]"
        )
        ones = {**ids, "name": "attention_mask", "data": [[1, 1, 1], [1, 1, 1]]}
        zeros = {**ids, "name": "token_type_ids", "data": [[0, 0, 0], [0, 0, 0]]}
        outputs = [{"name": "pooler_output"}, {"name": "pooler_output"}]
        twice = {"inputs": [ids, ones, zeros], "outputs": outputs}
        check_error(client.post(f"/v2/models/{name}/infer", json=twice), 422, "validation", "asked for twice")
        huge = {**ids, "data": [10**30, 1, 2, 3, 4, 5]}
        check_error(client.post(f"/v2/models/{name}/infer", json={"inputs": [huge]}), 422, "validation", "INT64")


def read_until_closed(sock: socket.socket, limit: int = 1 << 20) -> str:
    """Everything the server sends until it closes the connection (at most ``limit`` bytes)."""
    data = b""
    while len(data) < limit:
        chunk = sock.recv(65536)
        if not chunk:
            break
        data += chunk
    return data.decode()


def test_a_stalled_body_gets_408_and_does_not_hold_the_drain(tmp_path: Path, tiny_export: Path) -> None:
    server = Server(tiny_export, tmp_path / "server.log", "--request-timeout", "1", "--drain-timeout", "20")
    try:
        with socket.create_connection((HOST, server.port), timeout=10) as sock:
            sock.sendall(b"POST /embed HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n"
                         b"Content-Length: 27\r\n\r\n{\"inputs\": ")  # fmt: skip
            answer = read_until_closed(sock)  # the server answers once the body is 1 s late, then closes
        assert answer.startswith("HTTP/1.1 408"), answer
        assert '"error_type": "request_timeout"' in answer
        # a drain does not wait for a body that is still on its way: it answers 503 and exits 0 at once
        stalled = socket.create_connection((HOST, server.port), timeout=10)
        stalled.sendall(b"POST /embed HTTP/1.1\r\nHost: x\r\nContent-Length: 27\r\n\r\n{")
        time.sleep(0.3)
        started = time.monotonic()
        assert server.stop() == 0, server.log.read_text()[-3000:]
        assert time.monotonic() - started < 10  # not the 20 s drain timeout
        assert stalled.recv(65536).decode().startswith("HTTP/1.1 503")
        stalled.close()
    finally:
        server.stop()


def test_413_for_large_bodies_and_too_many_inputs(tight: Server) -> None:
    key = {"Authorization": "Bearer s3cret"}
    big = json.dumps({"inputs": ["x" * 30_000]}).encode()
    with tight.client(headers=key) as client:
        check_error(client.post("/embed", content=big), 413, "payload_too_large", "payload limit of 20000 bytes")

        def chunks() -> Iterator[bytes]:  # no Content-Length: the limit is enforced while reading
            for start in range(0, len(big), 4096):
                yield big[start : start + 4096]

        streamed = client.post("/embed", content=chunks(), headers={"content-type": "application/json"})
        check_error(streamed, 413, "payload_too_large", "larger than the payload limit")
        many = client.post("/embed", json={"inputs": ["a"] * 5})
        check_error(many, 413, "payload_too_large", "5 inputs in one request, more than --max-client-batch-size 4")
        assert client.post("/embed", json={"inputs": ["a"] * 4}).status_code == 200


def test_401_without_the_right_bearer_token(tight: Server) -> None:
    with tight.client() as client:
        check_error(client.post("/embed", json={"inputs": "a"}), 401, "unauthorized", "no bearer token")
        wrong = client.post("/embed", json={"inputs": "a"}, headers={"Authorization": "Bearer nope"})
        body = check_error(wrong, 401, "unauthorized", "wrong bearer token")
        assert "--api-key" in body["error"]
        assert wrong.headers["www-authenticate"] == "Bearer"
        check_error(client.get("/info"), 401, "unauthorized", "bearer")
        for path in ("/health", "/ready", "/metrics", "/v2/health/ready", "/docs"):
            assert client.get(path).status_code == 200, path
        described = client.get("/openapi.json").json()  # readable without the key, and it declares the key
        assert described["components"]["securitySchemes"]["bearer"] == {"type": "http", "scheme": "bearer"}
        assert described["security"] == [{"bearer": []}]
        ok = client.post("/embed", json={"inputs": "a"}, headers={"Authorization": "Bearer s3cret"})
        assert ok.status_code == 200


def test_429_with_retry_after_when_the_queue_is_full(held: Server) -> None:
    held.wait_for(lambda: held.metric("bertonnx_queue_depth") == 0, "an empty queue")
    with held.client() as client, ThreadPoolExecutor(1) as pool:
        first = pool.submit(httpx.post, f"{held.url}/embed", json={"inputs": ["a", "b", "c"]}, timeout=30)
        held.wait_for(lambda: held.metric("bertonnx_queue_depth") == 3, "3 queued inputs")
        refused = client.post("/embed", json={"inputs": ["d", "e"]})
        body = check_error(
            refused, 429, "overloaded", "the queue is full (3 inputs waiting and 2 in this request, max_queue 4)"
        )
        assert int(refused.headers["retry-after"]) >= 1
        assert f"retry after {refused.headers['retry-after']} s" in body["error"]
        # refused before it is tokenized: an input that tokenization would refuse (422) gets the 429
        check_error(client.post("/embed", json={"inputs": [LONG_TEXT] * 2}), 429, "overloaded", "max_queue 4")
        check_error(first.result(timeout=30), 504, "timeout", "--request-timeout 2 s")  # held past its deadline


def test_504_drops_the_request_without_computing_it(held: Server) -> None:
    held.wait_for(lambda: held.metric("bertonnx_queue_depth") == 0, "an empty queue")
    before = held.metric("bertonnx_dropped_inputs_total", reason="timeout")
    with held.client() as client:
        started = time.monotonic()
        late = client.post("/embed", json={"inputs": ["one", "two"]})
    check_error(late, 504, "timeout", "were dropped, not computed")
    assert 1.5 < time.monotonic() - started < 10
    assert held.metric("bertonnx_dropped_inputs_total", reason="timeout") == before + 2
    assert held.metric("bertonnx_batch_size_count") == 0  # nothing was ever computed on this server


def test_a_disconnected_clients_inputs_are_not_computed(held: Server) -> None:
    held.wait_for(lambda: held.metric("bertonnx_queue_depth") == 0, "an empty queue")
    before = held.metric("bertonnx_dropped_inputs_total", reason="disconnected")
    body = json.dumps({"inputs": ["going", "gone", "away"]}).encode()
    head = (
        f"POST /embed HTTP/1.1\r\nHost: {HOST}\r\nContent-Type: application/json\r\nContent-Length: {len(body)}\r\n\r\n"
    )
    with socket.create_connection((HOST, held.port), timeout=10) as sock:
        sock.sendall(head.encode() + body)
        held.wait_for(lambda: held.metric("bertonnx_queue_depth") == 3, "the inputs to be queued")
    held.wait_for(
        lambda: held.metric("bertonnx_dropped_inputs_total", reason="disconnected") == before + 3,
        "the disconnected inputs to be dropped",
        timeout=1.5,  # well before the 2 s request timeout would drop them as "timeout"
    )
    assert held.metric("bertonnx_queue_depth") == 0
    assert held.metric("bertonnx_batch_size_count") == 0


def test_not_ready_is_503_and_health_stays_200(tiny_export: Path) -> None:
    """Before loading and warm-up finish (here: the app's lifespan never ran) model routes say 503."""
    from bertonnx.serve import create_app

    async def scenario() -> None:
        transport = httpx.ASGITransport(app=create_app(tiny_export))
        async with httpx.AsyncClient(transport=transport, base_url="http://test") as client:
            assert (await client.get("/health")).status_code == 200
            check_error(await client.get("/ready"), 503, "unavailable", "still loading")
            not_ready = await client.post("/embed", json={"inputs": "a"})
            check_error(not_ready, 503, "unavailable", "retry when GET /ready answers 200")
            assert not_ready.headers["retry-after"] == "1"

    asyncio.run(scenario())


# -- batching across requests and concurrency ------------------------------------------------------------


def test_concurrent_requests_are_batched_together_and_keep_their_answers(tight: Server, model: BertOnnx) -> None:
    key = {"Authorization": "Bearer s3cret"}
    requests: list[tuple[str, dict[str, Any], Any]] = [
        ("/embed", {"inputs": TEXTS[:2], "pooling": "mean"}, model.embed(TEXTS[:2], "mean", normalize=True)),
        ("/embed", {"inputs": TEXTS[2:4], "pooling": "cls", "normalize": False}, model.embed(TEXTS[2:4], "cls")),
        ("/embed", {"inputs": [TEXTS[4]]}, model.embed([TEXTS[4]], normalize=True)),
        ("/predict", {"inputs": [list(p) for p in PAIRS[:2]]}, model.nsp(*zip(*PAIRS[:2], strict=True))),
        ("/v1/embeddings", {"input": TEXTS[1]}, model.embed([TEXTS[1]], normalize=True)),
        ("/encode", {"inputs": [TEXTS[0]]}, model([TEXTS[0]]).pooler_output),
    ]
    before = tight.metric("bertonnx_batch_requests_count")
    before_single = tight.metric("bertonnx_batch_requests_bucket", le="1.0")
    barrier = threading.Barrier(len(requests))

    def send(path: str, body: dict[str, Any]) -> httpx.Response:
        with tight.client(headers=key) as client:
            barrier.wait(timeout=10)
            return client.post(path, json=body)

    with ThreadPoolExecutor(len(requests)) as pool:
        futures = [pool.submit(send, path, body) for path, body, _ in requests]
        answers = [f.result(timeout=60) for f in futures]
    for (path, _, expected), answer in zip(requests, answers, strict=True):
        assert answer.status_code == 200, answer.text
        got = answer.json()
        if path == "/predict":
            got = [next(p["score"] for p in pair if p["label"] == "is_next") for pair in got]
        elif path == "/v1/embeddings":
            got = [d["embedding"] for d in got["data"]]
        elif path == "/encode":
            got = [got[0]["pooler_output"]]
        close(got, expected)
    batches = tight.metric("bertonnx_batch_requests_count") - before
    single = tight.metric("bertonnx_batch_requests_bucket", le="1.0") - before_single
    assert batches < len(requests), "the requests were not batched together"
    assert batches - single >= 1  # at least one engine run held inputs of more than one request


def test_64_concurrent_clients_get_the_serial_answers(server: Server, model: BertOnnx) -> None:
    corpus = [f"{TEXTS[i % len(TEXTS)]} number {i}" for i in range(64)]
    expected = model.embed(corpus, "mean", normalize=True)
    pairs = [(corpus[i], corpus[(i + 1) % 64]) for i in range(64)]
    expected_nsp = model.nsp([a for a, _ in pairs], [b for _, b in pairs])

    async def client_session(client: httpx.AsyncClient, i: int) -> tuple[Any, Any]:
        embedded = await client.post("/embed", json={"inputs": [corpus[i], corpus[(i * 7) % 64]], "pooling": "mean"})
        predicted = await client.post("/predict", json={"inputs": list(pairs[i])})
        return embedded.json(), predicted.json()

    async def scenario() -> list[tuple[Any, Any]]:
        limits = httpx.Limits(max_connections=64)
        async with httpx.AsyncClient(base_url=server.url, timeout=60, limits=limits) as client:
            return await asyncio.gather(*(client_session(client, i) for i in range(64)))

    results = asyncio.run(asyncio.wait_for(scenario(), timeout=120))
    for i, (embedded, predicted) in enumerate(results):
        close(embedded, expected[[i, (i * 7) % 64]])
        close(next(p["score"] for p in predicted if p["label"] == "is_next"), expected_nsp[i])


# -- lifecycle -------------------------------------------------------------------------------------------


def test_sigterm_during_load_loses_no_accepted_request_and_exits_0(
    tmp_path: Path, tiny_export: Path, model: BertOnnx
) -> None:
    # one batch holds all six (the longest text x 6 passes the default 512 tokens), so it is held open 1.5 s
    server = Server(
        tiny_export, tmp_path / "drain.log", "--batch-wait-ms", "1500", "--drain-timeout", "20",
        "--max-batch-tokens", "2048",
    )  # fmt: skip
    try:
        count = 6
        with ThreadPoolExecutor(count) as pool:
            futures = [
                pool.submit(httpx.post, f"{server.url}/embed", json={"inputs": [TEXTS[i % 5]]}, timeout=30)
                for i in range(count)
            ]
            server.wait_for(lambda: server.metric("bertonnx_queue_depth") == count, "all requests to be queued")
            server.process.send_signal(signal.SIGTERM)
            late = httpx.post(f"{server.url}/embed", json={"inputs": ["too late"]}, timeout=10)
            check_error(late, 503, "unavailable", "shutting down")
            assert late.headers["connection"] == "close"
            answers = [f.result(timeout=30) for f in futures]
        assert server.process.wait(timeout=20) == 0
    finally:
        server.stop()
    for i, answer in enumerate(answers):
        assert answer.status_code == 200, answer.text
        close(answer.json(), model.embed([TEXTS[i % 5]], normalize=True))
    log = (tmp_path / "drain.log").read_text()
    assert "SIGTERM: draining" in log
    assert "drained in" in log


def test_a_model_that_fails_to_load_is_reported_and_exits_3(tmp_path: Path, tiny_export: Path) -> None:
    broken = tmp_path / "broken"
    shutil.copytree(tiny_export, broken)
    with open(broken / "model.onnx.data", "r+b") as data:  # the manifest still lists the old size
        data.truncate(100)
    port = free_port()
    command = [sys.executable, "-m", "bertonnx.cli", "serve", str(broken), "--port", str(port), "--threads", "1"]
    result = subprocess.run(command, capture_output=True, text=True, timeout=120, cwd=ROOT)
    assert result.returncode == 3, result.stderr
    assert "the model failed to load" in result.stderr
    assert "model.onnx.data" in result.stderr


# -- the command -----------------------------------------------------------------------------------------


def test_serve_without_the_extra_says_how_to_install_it(tiny_export: Path) -> None:
    code = (
        "import sys\n"
        "sys.modules['fastapi'] = None  # as if the serve extra were not installed\n"
        "import bertonnx, bertonnx.cli\n"
        "names = ('fastapi', 'uvicorn', 'starlette', 'prometheus_client', 'pydantic')\n"
        "assert not [name for name in names if sys.modules.get(name) is not None]\n"
        f"sys.exit(bertonnx.cli.main(['serve', {str(tiny_export)!r}]))\n"
    )
    result = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120, cwd=ROOT)
    assert result.returncode == 2, result.stderr
    assert "pip install 'bertonnx[serve]'" in result.stderr
    assert len(result.stderr.strip().splitlines()) == 1


def test_serve_refuses_a_bad_directory_or_option_before_binding(tmp_path: Path, tiny_export: Path) -> None:
    from bertonnx.serve.cli import main

    assert main([str(tmp_path / "missing")]) == 2
    assert main([str(tiny_export), "--variant", "nope"]) == 2
    assert main(["--max-queue", "2", str(tiny_export)]) == 2  # options anywhere; max_queue < 32


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["--request-timeout", "nan"], "argument --request-timeout: input should be a finite number, got nan"),
        (["--batch-wait-ms", "inf"], "argument --batch-wait-ms: input should be a finite number, got inf"),
        (["--api-key", ""], "argument --api-key: string should have at least 1 character, got ''"),
        (["--port", "abc"], "argument --port: expected a port number 0-65535, got 'abc'"),
        (["--port", "99999"], "argument --port: expected a port number 0-65535, got 99999"),
        (["--host", "not-a-host.invalid"], "--host 'not-a-host.invalid' is not an address"),
        (["--write-timeout", "0"], "argument --write-timeout: input should be greater than 0"),
        (["--max-url-bytes", "65536"], "max_url_bytes (65536) must be <= max_header_bytes (32768)"),
        (["--max-response-bytes", "-5"], "argument --max-response-bytes: input should be greater than or equal to 1"),
    ],
)
def test_bad_serve_options_are_one_line_exit_2(tiny_export: Path, args: list[str], message: str) -> None:
    port = [] if "--port" in args else ["--port", str(free_port())]  # an option given twice is its own error
    command = [sys.executable, "-m", "bertonnx.cli", "serve", str(tiny_export), *port, *args]
    result = subprocess.run(command, capture_output=True, text=True, timeout=120, cwd=ROOT)
    assert result.returncode == 2, result.stderr
    assert result.stderr.startswith("bertonnx serve: error: "), result.stderr  # every command's style
    assert message in result.stderr
    assert len(result.stderr.strip().splitlines()) == 1, result.stderr


def test_serve_and_serve_ray_build_their_options_in_one_place(
    monkeypatch: pytest.MonkeyPatch, tiny_export: Path
) -> None:
    """``bertonnx serve DIR --ray --max-queue-wait 0`` runs, with 0 meaning no limit as documented."""
    import bertonnx.serve.ray_serve as ray_serve
    from bertonnx.cli import main as bertonnx_main
    from bertonnx.command import optional_address_argv
    from bertonnx.serve import ServeOptions
    from bertonnx.serve.arguments import serve_options
    from bertonnx.serve.cli import SERVE_COMMAND

    started: list[tuple[str, str | None, ServeOptions]] = []

    def deployed(args: Any, options: ServeOptions) -> int:  # stands in for Ray: what it would deploy
        started.append((args.model_dir, args.ray, options))
        return 0

    monkeypatch.setattr(ray_serve, "serve_on_ray", deployed)
    for ray in (["--ray"], ["--ray", "auto"]):
        argv = ["serve", *ray, str(tiny_export), "--max-queue-wait", "0", "--max-batch-requests", "0"]
        assert bertonnx_main(argv) == 0
        model_dir, address, options = started.pop()
        assert model_dir == str(tiny_export)  # a bare --ray did not take DIR for its address
        assert address == (ray[1] if len(ray) > 1 else "")  # "": start a local cluster
        assert (options.max_queue_wait, options.max_batch_requests) == (None, None)
    plain = SERVE_COMMAND.parser().parse_intermixed_args(
        optional_address_argv([str(tiny_export), "--max-queue-wait", "0"])
    )
    assert plain.ray is None
    assert serve_options(plain).max_queue_wait is None
    assert serve_options(SERVE_COMMAND.parser().parse_intermixed_args([str(tiny_export)])) == ServeOptions()


def test_a_taken_port_or_a_file_for_a_directory_is_one_line(tmp_path: Path, tiny_export: Path) -> None:
    with socket.socket() as taken:
        taken.bind((HOST, 0))
        taken.listen()
        port = str(taken.getsockname()[1])
        result = subprocess.run(
            [sys.executable, "-m", "bertonnx.cli", "serve", str(tiny_export), "--port", port],
            capture_output=True, text=True, timeout=120, cwd=ROOT,
        )  # fmt: skip
    assert result.returncode == 2, result.stderr
    assert f"cannot listen on 127.0.0.1:{port}" in result.stderr
    a_file = tmp_path / "model.onnx"
    a_file.write_bytes(b"")
    result = subprocess.run(
        [sys.executable, "-m", "bertonnx.cli", "serve", str(a_file)], capture_output=True, text=True, timeout=120,
        cwd=ROOT,
    )  # fmt: skip
    assert result.returncode == 2, result.stderr
    assert "is a file, not a model directory" in result.stderr


def test_import_bertonnx_never_imports_the_server_dependencies() -> None:
    server_modules = {"fastapi", "uvicorn", "starlette", "pydantic", "prometheus_client"}
    code = f"import sys, bertonnx, bertonnx.cli; print(sorted({server_modules!r} & set(sys.modules)))"
    result = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120, cwd=ROOT)
    assert result.returncode == 0, result.stderr
    assert result.stdout.strip() == "[]"


@pytest.mark.slow
def test_bert_base_over_http_matches_offline(tmp_path: Path, bert_base_export: Path) -> None:
    """The full-size export behind the server: TEI, OpenAI and NSP answers equal offline ``BertOnnx``."""
    import openai

    model = BertOnnx(bert_base_export, threads=1)
    server = Server(bert_base_export, tmp_path / "bert-base.log")
    try:
        with server.client() as client:
            embedded = client.post("/embed", json={"inputs": TEXTS, "pooling": "mean", "normalize": False})
            close(embedded.json(), model.embed(TEXTS, "mean"))
            predicted = client.post("/predict", json={"inputs": [list(p) for p in PAIRS]}).json()
            scores = [next(p["score"] for p in pair if p["label"] == "is_next") for pair in predicted]
            close(scores, model.nsp([a for a, _ in PAIRS], [b for _, b in PAIRS]))
            info = client.get("/info").json()
            assert info["random_weights"] is True
            assert info["hidden_size"] == 768
        result = openai.OpenAI(base_url=f"{server.url}/v1", api_key="unused", max_retries=0).embeddings.create(
            model=info["model_name"], input=TEXTS[:2]
        )
        close([d.embedding for d in result.data], model.embed(TEXTS[:2], normalize=True))
    finally:
        assert server.stop() == 0
