"""The corpus job and the Python API on a real local Ray cluster (GCS, raylet, worker processes).

One cluster per module (``ray.init(num_cpus=2)`` takes ~8 s here), with the object store capped. A
cluster started apart with ``ray start --head`` cannot be joined by address on these machines (Ray
advertises the network address, not loopback), so every job here runs on the cluster this module starts.
"""

from __future__ import annotations

import json
import os
import random
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import urllib.error
import urllib.request
import warnings
from collections.abc import Iterator
from pathlib import Path

import numpy as np
import pyarrow as pa
import pytest

ray = pytest.importorskip("ray")

from bertonnx import BertOnnx  # noqa: E402
from bertonnx.cli import main  # noqa: E402
from bertonnx.corpus import BadRowError, BertOnnxPredictor, TaskOptions, read_output  # noqa: E402
from bertonnx.corpus.job import run_local_job  # noqa: E402
from bertonnx.corpus.ray_job import run_ray_job  # noqa: E402
from bertonnx.ray_cluster import LOCAL_CLUSTER  # noqa: E402

from .conftest import ROOT  # noqa: E402

ATOL = 1e-5
OBJECT_STORE_BYTES = 300 * 1024 * 1024
CHUNK_ROWS = 64  # many batches from a small corpus, so several actors share the work
WORDS = [
    "the",
    "weather",
    "is",
    "nice",
    "today",
    "and",
    "i",
    "agree",
    "with",
    "you",
    "while",
    "a",
    "quick",
    "brown",
    "fox",
    "jumps",
    "over",
    "lazy",
    "dogs",
]
BAD_LINES = {17: '{"text": null}', 101: "not json", 230: '{"text": 3}', 333: json.dumps({"text": "word " * 600})}


def start_local_cluster(num_cpus: int) -> None:
    """A new local cluster, whatever Ray's ``ray_current_cluster`` file or ``RAY_ADDRESS`` names: the tests never
    join a cluster left on the machine (a bare ``ray.init(num_cpus=...)`` would try to, and refuse num_cpus)."""
    ray.init(
        address=LOCAL_CLUSTER,
        num_cpus=num_cpus,
        object_store_memory=OBJECT_STORE_BYTES,
        include_dashboard=False,
        log_to_driver=False,
    )


@pytest.fixture(scope="module")
def cluster() -> Iterator[None]:
    start_local_cluster(2)
    yield
    ray.shutdown()


def test_a_stale_current_cluster_file_is_never_joined(tiny_export: Path, tmp_path: Path) -> None:
    """Ray's ``ray_current_cluster`` file naming a dead cluster (here: an address nothing listens on, in a Ray
    temp dir of this test's own) neither stops the suite's cluster nor ``bertonnx batch --ray``."""
    temp = Path(tempfile.mkdtemp(prefix="rs", dir="/tmp"))  # short: Ray's socket paths must fit 107 bytes
    try:
        (temp / "ray").mkdir()
        (temp / "ray" / "ray_current_cluster").write_text("10.255.255.1:6379\n", encoding="utf-8")
        texts = tmp_path / "texts.txt"
        texts.write_text("the weather is nice\ni agree with you\n", encoding="utf-8")
        env = {k: v for k, v in os.environ.items() if k != "RAY_ADDRESS"} | {"TMPDIR": str(temp)}
        script = "from tests.test_ray import start_local_cluster, ray; start_local_cluster(1); ray.shutdown()"
        started = subprocess.run(
            [sys.executable, "-c", script], cwd=ROOT, env=env, capture_output=True, text=True, timeout=180
        )
        assert started.returncode == 0, started.stderr[-2000:]
        output = tmp_path / "out.parquet"
        argv = ["batch", str(tiny_export), "--ray", "--input", str(texts), "--output", str(output), "--actors", "1"]
        job = subprocess.run(
            [sys.executable, "-m", "bertonnx.cli", *argv],
            cwd=ROOT,
            env=env,
            capture_output=True,
            text=True,
            timeout=300,
        )
        assert job.returncode == 0, job.stderr[-2000:]
        assert "10.255.255.1" not in job.stderr
        assert read_output(output).num_rows == 2
    finally:
        shutil.rmtree(temp, ignore_errors=True)


@pytest.fixture(scope="module")
def corpus(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """400 rows of 1 to 80 words, four of them bad."""
    rng = random.Random(0)
    path = tmp_path_factory.mktemp("corpus") / "corpus.jsonl"
    lines = [
        BAD_LINES.get(i) or json.dumps({"text": " ".join(rng.choices(WORDS, k=rng.randint(1, 80)))}) for i in range(400)
    ]
    path.write_text("\n".join(lines) + "\n", encoding="utf-8")
    return path


@pytest.fixture(scope="module")
def local_output(tiny_export: Path, corpus: Path, tmp_path_factory: pytest.TempPathFactory) -> Path:
    output = tmp_path_factory.mktemp("local") / "local.parquet"
    run_local_job(tiny_export, corpus, output, TaskOptions(on_error="skip"), threads=1, chunk_rows=CHUNK_ROWS)
    return output


def assert_same_rows(ray_output: Path, local_output: Path) -> None:
    got, expected = read_output(ray_output), read_output(local_output)
    assert got.column("id").to_pylist() == expected.column("id").to_pylist()
    assert got.column("n_tokens").equals(expected.column("n_tokens"))
    difference = np.abs(np.array(got["embedding"].to_pylist()) - np.array(expected["embedding"].to_pylist()))
    assert difference.max() <= ATOL
    rejects = local_output.with_name(local_output.stem + ".rejects.jsonl").read_text()
    assert ray_output.with_name(ray_output.stem + ".rejects.jsonl").read_text() == rejects


@pytest.mark.usefixtures("cluster")
@pytest.mark.parametrize("actors", [1, 2])
def test_ray_job_equals_local_job(
    tiny_export: Path, corpus: Path, local_output: Path, tmp_path: Path, actors: int
) -> None:
    output = tmp_path / "ray.parquet"
    summary = run_ray_job(
        tiny_export, corpus, output, TaskOptions(on_error="skip"), actors=actors, chunk_rows=CHUNK_ROWS, progress=False
    )
    assert (summary.rows, summary.outputs, summary.rejected) == (400, 396, len(BAD_LINES))
    assert output.is_dir()
    assert_same_rows(output, local_output)
    rejected = [json.loads(line)["id"] for line in (tmp_path / "ray.rejects.jsonl").read_text().splitlines()]
    assert rejected == sorted(BAD_LINES)
    assert read_output(output).num_rows + len(rejected) == 400
    assert [p.name for p in tmp_path.iterdir() if ".partial" in p.name] == []


@pytest.mark.usefixtures("cluster")
def test_bad_row_stops_the_ray_job_and_writes_nothing(tiny_export: Path, corpus: Path, tmp_path: Path) -> None:
    output = tmp_path / "ray.parquet"
    with pytest.raises(BadRowError, match=r"row (17|101|230|333): "):
        run_ray_job(tiny_export, corpus, output, TaskOptions(), actors=1, chunk_rows=CHUNK_ROWS, progress=False)
    assert list(tmp_path.iterdir()) == []


def kill_once_predictor(marker: Path) -> type[BertOnnxPredictor]:
    """A predictor that kills its own process (SIGKILL, as the OOM killer would) on an actor's third batch,
    once per job (the first actor to get there creates ``marker``). Every call logs its pid beside it.

    Defined in a function so Ray pickles it by value: workers need not import this test module.
    """

    class KillOncePredictor(BertOnnxPredictor):
        calls = 0

        def __call__(self, batch: pa.Table) -> pa.Table:  # type: ignore[override]
            self.calls += 1
            with open(marker.with_suffix(".pids"), "a", encoding="utf-8") as log:
                log.write(f"{os.getpid()}\n")
            if self.calls == 3:
                try:
                    fd = os.open(marker, os.O_CREAT | os.O_EXCL | os.O_WRONLY)
                except FileExistsError:
                    pass
                else:
                    os.write(fd, str(os.getpid()).encode())
                    os.close(fd)
                    os.kill(os.getpid(), signal.SIGKILL)
            return super().__call__(batch)

    return KillOncePredictor


@pytest.mark.usefixtures("cluster")
def test_an_actor_killed_during_the_job_still_gives_every_row_once(
    tiny_export: Path, corpus: Path, local_output: Path, tmp_path: Path
) -> None:
    marker = tmp_path / "killed"
    output = tmp_path / "ray.parquet"
    summary = run_ray_job(
        tiny_export, corpus, output, TaskOptions(on_error="skip"), actors=2, chunk_rows=CHUNK_ROWS,
        progress=False, predictor=kill_once_predictor(marker),
    )  # fmt: skip
    killed = int(marker.read_text())
    pids = [int(p) for p in marker.with_suffix(".pids").read_text().split()]
    assert killed in pids
    assert pids.index(killed) < len(pids) - 1  # batches ran after the kill, on the restarted or other actor
    assert (summary.outputs, summary.rejected) == (396, len(BAD_LINES))
    assert_same_rows(output, local_output)


@pytest.mark.usefixtures("cluster")
def test_python_api_map_batches_on_a_users_dataset(tiny_export: Path) -> None:
    texts = [" ".join(WORDS[: 1 + i % len(WORDS)]) for i in range(50)]
    dataset = ray.data.from_items([{"id": i, "text": t} for i, t in enumerate(texts)])
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # Ray >= 2.51 prefers compute=ActorPoolStrategy(size=N) to concurrency=N
        mapped = dataset.map_batches(
            BertOnnxPredictor,
            fn_constructor_kwargs={"model_dir": str(tiny_export), "threads": 1, "pooling": "mean"},
            concurrency=1,
            num_cpus=1,
            batch_size=16,
            batch_format="pyarrow",
        )
        rows = sorted(mapped.take_all(), key=lambda row: row["id"])
    assert [row["id"] for row in rows] == list(range(50))
    expected = BertOnnx(tiny_export, threads=1).embed(texts, "mean")
    np.testing.assert_allclose(np.array([row["embedding"] for row in rows]), expected, atol=ATOL, rtol=0)


@pytest.mark.usefixtures("cluster")
def test_cli_ray_flag_before_dir(
    tiny_export: Path, corpus: Path, local_output: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    output = tmp_path / "cli.parquet"
    argv = ["batch", "--ray", str(tiny_export), "--input", str(corpus), "--output", str(output), "--actors", "1"]
    code = main([*argv, "--on-error", "skip", "--chunk-size", str(CHUNK_ROWS), "--json"])
    out, err = capsys.readouterr()
    assert code == 0, err
    summary = json.loads(out)
    assert summary["runner"] == "ray, 1 actors x 1 threads"
    assert summary["rows"] == summary["outputs"] + summary["rejected"] == 400
    assert_same_rows(output, local_output)
    code = main([*argv, "--threads-per-actor", "3"])
    assert code == 2
    assert "the cluster has 2" in capsys.readouterr().err


@pytest.mark.usefixtures("cluster")
def test_a_job_ray_cannot_finish_stops_with_one_line_and_writes_nothing(
    tiny_export: Path, corpus: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    """A failure beyond Ray's retries (here: raised where the job writes) is Ray's, named as such, not a bug."""

    def lost(*args: object, **kwargs: object) -> None:
        raise ray.exceptions.RaySystemError("the node holding a block died\nmore detail")

    monkeypatch.setattr(ray.data.Dataset, "write_datasink", lost)
    output = tmp_path / "ray.parquet"
    code = main(["batch", str(tiny_export), "--input", str(corpus), "--output", str(output), "--ray", "--actors", "1"])
    err = capsys.readouterr().err
    assert code == 2
    assert err.startswith("bertonnx batch: error: the Ray cluster could not finish the job (RaySystemError: ")
    assert err.count("\n") == 1
    assert list(tmp_path.iterdir()) == []


def free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return int(probe.getsockname()[1])


def post(url: str, body: object) -> tuple[int, object]:
    request = urllib.request.Request(
        url, data=json.dumps(body).encode(), headers={"Content-Type": "application/json"}, method="POST"
    )
    try:
        with urllib.request.urlopen(request, timeout=30) as response:
            return response.status, json.loads(response.read())
    except urllib.error.HTTPError as error:
        return error.code, json.loads(error.read())


def assert_same_json(got: object, expected: object) -> None:
    """Equal structure and strings; numbers within the fp32 tolerance."""
    if isinstance(expected, float):
        assert isinstance(got, (float, int))
        assert abs(got - expected) <= ATOL
    elif isinstance(expected, list):
        assert isinstance(got, list)
        assert len(got) == len(expected)
        for g, e in zip(got, expected, strict=True):
            assert_same_json(g, e)
    elif isinstance(expected, dict):
        assert isinstance(got, dict)
        assert got.keys() == expected.keys()
        for key in expected:
            assert_same_json(got[key], expected[key])
    else:
        assert got == expected


SERVE_REQUESTS = [
    ("/embed", {"inputs": ["the weather is nice", "i agree with you", ""], "pooling": "mean"}),
    ("/embed", {"inputs": "hello world", "normalize": False}),
    ("/predict", {"inputs": ["the weather is nice", "i agree with you"]}),
    ("/predict", {"inputs": [["the sky is blue", "stocks fell"], ["a", "b"]], "raw_scores": True}),
    ("/embed", {"inputs": []}),  # an error: same code and body
    ("/embed", {"inputs": ["word " * 600], "truncate": False}),  # too long: same error
]


SERVE_MAIN = "import sys; from bertonnx.serve.cli import main; sys.exit(main(sys.argv[1:]))"  # `bertonnx serve`


@pytest.mark.usefixtures("cluster")
def test_serve_deployment_answers_like_bertonnx_serve(tiny_export: Path) -> None:
    pytest.importorskip("bertonnx.serve")
    from ray import serve

    from bertonnx.serve import ServeOptions
    from bertonnx.serve.ray_serve import deployment, wait_ready

    plain_port, ray_port = free_port(), free_port()
    plain = subprocess.Popen(
        [sys.executable, "-c", SERVE_MAIN, str(tiny_export), "--port", str(plain_port), "--threads", "1"],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    try:
        serve.start(http_options={"host": "127.0.0.1", "port": ray_port})
        serve.run(deployment(tiny_export, ServeOptions(), replicas=2, threads=1), name="bertonnx", route_prefix="/")
        plain_url, ray_url = f"http://127.0.0.1:{plain_port}", f"http://127.0.0.1:{ray_port}"
        wait_ready(plain_url, 1, timeout=60)
        wait_ready(ray_url, 2, timeout=60)
        for path, body in SERVE_REQUESTS:
            expected_status, expected = post(plain_url + path, body)
            for _ in range(2):  # requests spread over both replicas
                status, got = post(ray_url + path, body)
                assert status == expected_status, (path, body, got)
                assert_same_json(got, expected)
        assert [post(plain_url + p, b)[0] for p, b in SERVE_REQUESTS][-2:] != [200, 200]  # the errors are errors
    finally:
        plain.terminate()
        plain.wait(timeout=30)
        serve.shutdown()
