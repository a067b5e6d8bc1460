"""The corpus job and the server on a real two-node Ray cluster: each node in its own network namespace.

``tests/test_ray.py`` runs everything on one node (``ray.init``). Here the head and a worker node each have
their own address (:mod:`tests.netns_cluster`), joined with token authentication as the README's
multi-machine set-up says, one CPU each, so a pool of two actors or two replicas must span both nodes.
Drivers run on the head node. Checked: the job's rows equal the local job's with actors on both nodes; the
worker node lost mid-job still gives every row exactly once; Ray Serve replicas on both nodes answer as
``bertonnx serve`` does, and the head keeps answering when the worker node goes away.

Slow: 2.5 min on a loaded 2-core machine (three ``ray start``, three jobs, one deployment, two node losses).
Needs root and iproute2 (CI has both); skipped otherwise, saying why.
"""

from __future__ import annotations

import json
import random
import select
import signal
import subprocess
import sys
import time
from collections import Counter
from collections.abc import Collection, Iterator
from pathlib import Path

import pytest

from bertonnx.corpus import TaskOptions
from bertonnx.corpus.job import run_local_job

from .netns_cluster import HEAD_IP, OPEN_PORTS, WORKER_IP, NetnsCluster, why_unavailable
from .test_ray import BAD_LINES, SERVE_REQUESTS, WORDS, assert_same_json, assert_same_rows, free_port, post

pytestmark = pytest.mark.slow

#: ``bertonnx ARGS`` with the interpreter running the tests (its venv's bertonnx and Ray).
BERTONNX = [sys.executable, "-c", "import sys; from bertonnx.cli import main; sys.exit(main(sys.argv[1:]))"]
CHUNK_ROWS = 64
CORPUS_ROWS = 400
#: Rows of the job that loses a node (~63 batches of 64).
LONG_CORPUS_ROWS = 4000
JOB_TIMEOUT_S = 240.0
SERVE_PORT = 8000  # inside the namespaces: free there whatever runs on the machine
SERVE_READY_TIMEOUT_S = 180.0
#: Seconds of requests through the head after the worker node is killed: past the head's verdict (~15 s).
AFTER_LOSS_S = 25.0
PREDICTOR_ACTOR = "MapWorker(MapBatches(BertOnnxPredictor))"
REPLICA_ACTOR = "ServeReplica:bertonnx:bertonnx"

#: Seconds each batch of the job that loses a node sleeps: ~63 batches over 2 actors last >= 6 s.
SLEEP_PER_BATCH_S = 0.2
#: ``bertonnx ARGS`` whose Ray job's actors run a predictor that sleeps per batch (defined in ``__main__``, so
#: Ray ships it by value; made the job's default predictor, as the command line has no option for it).
SLOW_BERTONNX = f"""
import sys, time
from bertonnx.cli import main
from bertonnx.corpus import BertOnnxPredictor, ray_job

class SlowPredictor(BertOnnxPredictor):
    def __call__(self, batch):
        time.sleep({SLEEP_PER_BATCH_S})
        return super().__call__(batch)

ray_job.run_ray_job.__kwdefaults__["predictor"] = SlowPredictor
sys.exit(main(sys.argv[1:]))
"""

#: Posts ``[[path, body], ...]`` (stdin) to ``BASE`` in rounds for at least ``SECONDS``; prints every
#: round's ``[status, json]`` answers (``[null, error]`` when no HTTP answer came). Runs in a namespace.
POSTER = """
import json, sys, time, urllib.error, urllib.request
base, seconds = sys.argv[1], float(sys.argv[2])
requests = json.load(sys.stdin)
rounds, deadline = [], time.monotonic() + seconds
while True:
    answers = []
    for path, body in requests:
        request = urllib.request.Request(base + path, data=json.dumps(body).encode(),
                                         headers={"Content-Type": "application/json"}, method="POST")
        try:
            with urllib.request.urlopen(request, timeout=30) as response:
                answers.append([response.status, json.loads(response.read())])
        except urllib.error.HTTPError as error:
            answers.append([error.code, json.loads(error.read())])
        except OSError as error:
            answers.append([None, repr(error)])
    rounds.append(answers)
    if time.monotonic() >= deadline:
        break
    time.sleep(0.2)
print(json.dumps(rounds))
"""


@pytest.fixture(scope="module")
def two_nodes() -> Iterator[NetnsCluster]:
    reason = why_unavailable()
    if reason is not None:
        pytest.skip(reason)
    with NetnsCluster() as cluster:
        yield cluster


def write_corpus(path: Path, rows: int, bad: dict[int, str]) -> Path:
    rng = random.Random(0)
    lines = [
        bad.get(i) or json.dumps({"text": " ".join(rng.choices(WORDS, k=rng.randint(1, 80)))}) for i in range(rows)
    ]
    path.write_text("\n".join(lines) + "\n", encoding="utf-8")
    return path


@pytest.fixture(scope="module")
def corpus(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return write_corpus(tmp_path_factory.mktemp("corpus") / "corpus.jsonl", CORPUS_ROWS, BAD_LINES)


@pytest.fixture(scope="module")
def long_corpus(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return write_corpus(tmp_path_factory.mktemp("corpus") / "long.jsonl", LONG_CORPUS_ROWS, BAD_LINES)


def local_job(model: Path, corpus: Path, output: Path) -> Path:
    run_local_job(model, corpus, output, TaskOptions(on_error="skip"), threads=1, chunk_rows=CHUNK_ROWS)
    return output


def batch_argv(model: Path, corpus: Path, output: Path, address: str) -> list[str]:
    return [
        *BERTONNX, "batch", str(model), "--input", str(corpus), "--output", str(output), "--ray", address,
        "--actors", "2", "--threads-per-actor", "1", "--chunk-size", str(CHUNK_ROWS), "--on-error", "skip",
        "--json", "--no-progress",
    ]  # fmt: skip


def predictor_nodes(cluster: NetnsCluster, known: Collection[str] = ()) -> dict[str, str]:
    """The node address of every corpus-job actor the cluster has had, by actor id (except ``known``)."""
    return {
        a["actor_id"]: a["node_ip"]
        for a in cluster.actors()
        if a["class_name"] == PREDICTOR_ACTOR and a["actor_id"] not in known
    }


def predictor_tasks(
    cluster: NetnsCluster, state: str = "FINISHED", wait_on: str | None = None, predictor: str = "BertOnnxPredictor"
) -> Counter[str]:
    """The corpus jobs' actor tasks (each computes one or more batches) in ``state``, by node address."""
    name = f"MapWorker(MapBatches({predictor})).submit"
    return Counter(cluster.tasks(name, state, wait_on=wait_on, timeout=JOB_TIMEOUT_S))


def assert_no_partial_files(directory: Path) -> None:
    leftovers = [p for p in directory.rglob("*") if ".partial" in p.name]
    assert leftovers == [], leftovers


def test_batch_with_actors_on_both_nodes_equals_the_local_job(
    two_nodes: NetnsCluster, tiny_export: Path, corpus: Path, tmp_path: Path
) -> None:
    two_nodes.ensure_worker()
    known, finished_before = set(predictor_nodes(two_nodes)), predictor_tasks(two_nodes)
    expected = local_job(tiny_export, corpus, tmp_path / "local.parquet")
    output = tmp_path / "two-nodes.parquet"
    argv = batch_argv(tiny_export, corpus, output, two_nodes.address)
    job = two_nodes.run(two_nodes.head_ns, argv, timeout=JOB_TIMEOUT_S)
    assert job.returncode == 0, job.stderr[-3000:]
    summary = json.loads(job.stdout)
    assert summary["runner"] == "ray, 2 actors x 1 threads"
    assert (summary["rows"], summary["outputs"], summary["rejected"]) == (CORPUS_ROWS, CORPUS_ROWS - 4, 4)
    assert_same_rows(output, expected)  # every id once, fp32 within 1e-5, the same rejects
    assert_no_partial_files(tmp_path)
    assert sorted(predictor_nodes(two_nodes, known).values()) == [HEAD_IP, WORKER_IP]  # one actor on each node
    finished = predictor_tasks(two_nodes) - finished_before
    assert set(finished) == {HEAD_IP, WORKER_IP}, finished  # and both computed
    connections = two_nodes.node_connections()  # the README's ports to open are the ports the nodes used
    assert connections
    assert [(w, h) for w, h in connections if w not in OPEN_PORTS and h not in OPEN_PORTS] == []


def test_serve_refuses_proxies_it_cannot_start_or_move(two_nodes: NetnsCluster, tiny_export: Path) -> None:
    """Serve runs a proxy on every node with a replica, each binding ``--host``, and keeps its first HTTP
    options while it runs; both traps end in one line at once, not in a two-minute wait for ``/ready``."""
    two_nodes.ensure_worker()
    serve = [*BERTONNX, "serve", str(tiny_export), "--ray", two_nodes.address]
    one_node = two_nodes.run(two_nodes.head_ns, [*serve, "--host", HEAD_IP, "--port", str(SERVE_PORT)], timeout=120)
    assert one_node.returncode == 2, one_node.stderr[-3000:]
    assert f"--host {HEAD_IP} is an address of one machine" in one_node.stderr
    assert "use --host 0.0.0.0" in one_node.stderr
    code = f"from ray import serve\nserve.start(http_options={{'host': '0.0.0.0', 'port': {SERVE_PORT}}})\nresult = 0"
    two_nodes.query(code)  # Serve now runs on the cluster (its controller outlives the driver)
    moved = two_nodes.run(two_nodes.head_ns, [*serve, "--host", "0.0.0.0", "--port", str(SERVE_PORT + 1)], timeout=120)
    assert moved.returncode == 2, moved.stderr[-3000:]
    assert f"Ray Serve already runs on this cluster with its proxies at 0.0.0.0:{SERVE_PORT}" in moved.stderr


def test_worker_node_lost_mid_job_still_gives_every_row_once(
    two_nodes: NetnsCluster, tiny_export: Path, long_corpus: Path, tmp_path: Path
) -> None:
    """The worker node is killed while its actor computes a batch. Ray Data restarts the lost actor
    (``max_restarts=-1``) and retries its batch (``max_task_retries=-1``); Ray retries lost read and write
    tasks and rebuilds lost blocks from their lineage. The restarted actor cannot be placed (the head's one
    CPU is taken), so the head's actor finishes the job. The sink's id check would refuse to commit a lost
    or doubled row. The job's predictor sleeps per batch, so that it lasts long enough to lose a node in,
    however fast the machine."""
    two_nodes.ensure_worker()
    finished_before = predictor_tasks(two_nodes, predictor="SlowPredictor")
    expected = local_job(tiny_export, long_corpus, tmp_path / "local.parquet")
    output = tmp_path / "lost-node.parquet"
    stderr = tmp_path / "job.stderr"
    driver = [sys.executable, "-c", SLOW_BERTONNX, *batch_argv(tiny_export, long_corpus, output, two_nodes.address)[3:]]
    with open(stderr, "w", encoding="utf-8") as err:
        job = two_nodes.popen(two_nodes.head_ns, driver, stdout=subprocess.PIPE, stderr=err)
    try:
        running = predictor_tasks(two_nodes, "RUNNING", WORKER_IP, "SlowPredictor")  # the worker's actor computes
        assert job.poll() is None, f"the job ended before the node could be lost:\n{stderr.read_text()[-3000:]}"
        two_nodes.kill_worker()
        lost = time.monotonic()
        out, _ = job.communicate(timeout=JOB_TIMEOUT_S)
    finally:
        if job.poll() is None:
            job.kill()
            job.wait()
    assert job.returncode == 0, stderr.read_text()[-3000:]
    summary = json.loads(out)  # stdout is the summary alone; Ray's "node marked dead" line went to stderr
    assert (summary["rows"], summary["outputs"]) == (LONG_CORPUS_ROWS, LONG_CORPUS_ROWS - len(BAD_LINES))
    assert_same_rows(output, expected)
    assert_no_partial_files(tmp_path)
    finished = predictor_tasks(two_nodes, predictor="SlowPredictor") - finished_before
    assert finished[HEAD_IP] > 0, finished
    after = time.monotonic() - lost
    print(
        f"job {summary['seconds']:.1f} s ({after:.1f} s after the loss); tasks running {running}, finished {finished}"
    )


def test_serve_replicas_on_both_nodes_answer_as_bertonnx_serve_and_survive_a_node_loss(
    two_nodes: NetnsCluster, tiny_export: Path, tmp_path: Path
) -> None:
    two_nodes.ensure_worker()
    plain_port = free_port()
    plain_url = f"http://127.0.0.1:{plain_port}"
    plain = subprocess.Popen(
        [*BERTONNX, "serve", str(tiny_export), "--port", str(plain_port), "--threads", "1"],
        stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
    )  # fmt: skip
    stderr = tmp_path / "serve.stderr"
    with open(stderr, "w", encoding="utf-8") as err:
        served = two_nodes.popen(
            two_nodes.head_ns,  # every node's proxy listens on its own address (0.0.0.0), port 8000
            [*BERTONNX, "serve", str(tiny_export), "--ray", two_nodes.address, "--replicas", "2",
             "--host", "0.0.0.0", "--port", str(SERVE_PORT)],
            stdout=subprocess.PIPE, stderr=err,
        )  # fmt: skip
    try:
        assert served.stdout is not None
        ready, _, _ = select.select([served.stdout], [], [], SERVE_READY_TIMEOUT_S)
        line = served.stdout.readline() if ready else ""
        assert line, f"bertonnx serve --ray did not get ready:\n{stderr.read_text()[-3000:]}"
        assert json.loads(line)["replicas"] == 2
        replicas = [
            a["node_ip"] for a in two_nodes.actors() if a["class_name"] == REPLICA_ACTOR and a["state"] == "ALIVE"
        ]
        assert sorted(replicas) == [HEAD_IP, WORKER_IP]

        from bertonnx.serve.ray_serve import wait_ready

        wait_ready(plain_url, 1, timeout=60)
        expected = [list(post(plain_url + path, body)) for path, body in SERVE_REQUESTS]
        assert [status for status, _ in expected][-2:] != [200, 200]  # the last two are errors, answered alike

        def answers(ip: str, seconds: float = 0.0) -> list[list[list[object]]]:
            """Rounds of SERVE_REQUESTS through the proxy on ``ip``, posted from the head node."""
            result = two_nodes.run(
                two_nodes.head_ns, [sys.executable, "-c", POSTER, f"http://{ip}:{SERVE_PORT}", str(seconds)],
                input=json.dumps(SERVE_REQUESTS), timeout=seconds + 120,
            )  # fmt: skip
            assert result.returncode == 0, result.stderr[-3000:]
            rounds: list[list[list[object]]] = json.loads(result.stdout)
            return rounds

        for ip in (HEAD_IP, WORKER_IP):  # each node's proxy, each routing to its own node's replica
            assert_same_json(answers(ip), [expected])

        two_nodes.kill_worker()
        lost = time.monotonic()
        rounds = answers(HEAD_IP, AFTER_LOSS_S)  # through the detection of the loss and after it
        assert time.monotonic() - lost >= AFTER_LOSS_S
        assert_same_json(rounds, [expected] * len(rounds))
        two_nodes.wait_worker_dead()
        assert_same_json(answers(HEAD_IP), [expected])
        print(
            f"{len(rounds)} rounds of {len(SERVE_REQUESTS)} requests answered in the {AFTER_LOSS_S:g} s after the loss"
        )
    finally:
        served.send_signal(signal.SIGTERM)  # deletes the application; Serve itself stays on the cluster
        plain.terminate()
        for process in (served, plain):
            try:
                process.wait(timeout=60)
            except subprocess.TimeoutExpired:
                process.kill()
                process.wait()
