"""Every code block of the README and of the reference pages it links (``docs/*.md``) that a user is meant to
run is run here, as written, in a fresh shell; every relative link of those pages must lead somewhere.

Each fenced block in ``bash``, ``sh`` or ``python`` carries a marker on the line before it (blank lines
between are allowed), an HTML comment that readers of the rendered page do not see::

    <!-- readme-test: run [models=NAME[:EXPORT],...] [makes=NAME,...] [extras=EXTRA] [modules=MODULE,...]
                           [server=NAME] [activated] [timeout=SECONDS] -->
    <!-- readme-test: skip REASON -->

``run``: the block runs in an empty working directory holding ``.venv`` (a link to this test's venv) and
``models/NAME`` (a link to a session export: ``bert-base`` for ``bert-base-uncased``, ``minilm`` for
``minilm``, or the one after the colon, e.g. ``models=bert-base-uncased:tiny`` where any export will do).
``makes=NAME``: the block itself writes ``models/NAME`` (a page makes its own models, as a reader would);
a later block of the same page that names ``NAME`` in ``models`` without an export gets that folder. A
name that neither an earlier block makes nor an export stands for is a problem of the page. A block that
makes folders runs once per session, when it or a block using its folders first runs.
The environment is a fresh one (``PATH`` of the system only, an empty ``HOME``); ``activated`` puts the
venv first on ``PATH`` as ``. .venv/bin/activate`` does. A bash block runs with ``-e -o pipefail``: every
command must succeed. A python block runs statement by statement in the venv's interpreter, and the
comment lines right below a statement that printed are what it must print (``# (1, 768)``). ``extras``:
skipped where that extra is not installed (the runtime-only venv). ``skip``: the reason is required, and
the README says it to readers too. Blocks in other languages (``text`` for synopses) are not run.
``modules``: skipped where one of these modules is not importable (e.g. the ``openai`` client, from the
test extra). ``server=NAME``: the block talks to ``bertonnx serve models/NAME`` as the README starts it
(``NAME`` must be one of the block's ``models``); the harness starts that command once per session from
its own folder, on a free loopback port instead of the README's 8080 (tests never take a fixed port), waits
for ``/ready``, and runs the block with ``127.0.0.1:8080`` replaced by that port; at the end of the session
the server must drain on SIGTERM and exit 0.

To add a kind of block: add its key to ``_parse_options`` and ``_prepare`` and describe it above.
"""

from __future__ import annotations

import dataclasses
import importlib.util
import json
import os
import re
import signal
import socket
import subprocess
import sys
import tempfile
import textwrap
import time
import urllib.request
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path

import pytest

from bertonnx.extras import EXTRA_MODULES, missing_modules

from .conftest import ROOT

README = ROOT / "README.md"
#: The reference pages the README links: their blocks are held to the same rules as the README's.
DOCS = sorted((ROOT / "docs").glob("*.md"))
PAGES = [README, *DOCS]
RUNNABLE = {"bash": "bash", "sh": "bash", "python": "python"}
MARKER = re.compile(r"^<!--\s*readme-test:\s*(?P<body>.*?)\s*-->\s*$")
FENCE = re.compile(r"^```(?P<language>[\w+-]*)\s*$")
HEADING = re.compile(r"^#+\s+(?P<title>.+)$")
#: models=NAME[:EXPORT]: the session fixture behind each EXPORT, and the default EXPORT of each NAME.
EXPORT_FIXTURES = {
    "tiny": "tiny_export",
    "bert-base": "bert_base_export",
    "minilm": "minilm_export",
    "minilm-st": "minilm_st_export",
    "tiny-classifier": "tiny_classifier_export",
    "tiny-reranker": "tiny_reranker_export",
    "ner": "tiny_ner_export",
    "qa": "tiny_qa_export",
}
DEFAULT_EXPORTS = {"bert-base-uncased": "bert-base", "minilm": "minilm"}
#: The export of a model folder an earlier block of the page makes (``makes=NAME``).
MADE = "made"
#: Exports the runtime-only venv has (prebuilt, see conftest); a block needing another is not torch-free.
TORCH_FREE_EXPORTS = ("tiny", "bert-base")
SLOW_EXPORTS = ("bert-base", "minilm", "minilm-st")
DEFAULT_TIMEOUT_S = 600
SYSTEM_PATH = "/usr/local/bin:/usr/bin:/bin"
#: The address the README's server examples use (``bertonnx serve``'s default) and how long the harness
#: waits for the server it starts to answer ``/ready``.
README_SERVER = "127.0.0.1:8080"
SERVER_READY_TIMEOUT_S = 300
SERVER_DRAIN_TIMEOUT_S = 60


@dataclass
class Block:
    """One fenced block of the README and its marker."""

    line: int
    language: str
    code: str
    section: str
    marker: str | None
    page: str = "README.md"
    models: dict[str, str] = field(default_factory=dict)
    extras: list[str] = field(default_factory=list)
    modules: list[str] = field(default_factory=list)
    server: str | None = None
    makes: list[str] = field(default_factory=list)
    #: models=NAME (no export) -> the earlier block of the page that makes models/NAME.
    made_by: dict[str, Block] = field(default_factory=dict)
    activated: bool = False
    timeout: int = DEFAULT_TIMEOUT_S
    problems: list[str] = field(default_factory=list)

    @property
    def action(self) -> str | None:
        return self.marker.split()[0] if self.marker else None

    @property
    def name(self) -> str:
        slug = re.sub(r"[^a-z0-9]+", "-", self.section.lower()).strip("-")
        page = "" if self.page == "README.md" else Path(self.page).stem + "-"
        return f"{page}line{self.line}-{slug}"

    @property
    def where(self) -> str:
        return f"{self.page} line {self.line}"


def _parse_options(block: Block) -> None:
    assert block.marker is not None
    action, _, rest = block.marker.partition(" ")
    if action == "skip":
        if not rest.strip():
            block.problems.append("a skip marker needs a reason: <!-- readme-test: skip REASON -->")
        return
    if action != "run":
        block.problems.append(f"marker must start with run or skip, got {action!r}")
        return
    for option in rest.split():
        key, _, value = option.partition("=")
        if key == "models" and value:
            for item in value.split(","):
                name, _, export = item.partition(":")
                export = export or DEFAULT_EXPORTS.get(name, "")
                if not export:  # made by an earlier block of the page (resolved by parse_readme)
                    block.models[name] = MADE
                    continue
                if export not in EXPORT_FIXTURES:
                    block.problems.append(
                        f"models={item}: no export for {name!r}; say NAME:EXPORT, EXPORT one of "
                        f"{', '.join(EXPORT_FIXTURES)}"
                    )
                block.models[name] = export
        elif key == "extras" and value:
            unknown = [e for e in value.split(",") if e not in EXTRA_MODULES]
            if unknown:
                block.problems.append(f"extras={value}: unknown {unknown}; known: {', '.join(EXTRA_MODULES)}")
            block.extras = value.split(",")
        elif key == "makes" and value:
            block.makes = value.split(",")
        elif key == "modules" and value:
            block.modules = value.split(",")
        elif key == "server" and value:
            block.server = value
        elif key == "activated" and not value:
            block.activated = True
        elif key == "timeout" and value.isdigit():
            block.timeout = int(value)
        else:
            block.problems.append(f"unknown option {option!r} in <!-- readme-test: {block.marker} -->")
    if block.server is not None and block.server not in block.models:
        block.problems.append(f"server={block.server}: also name it in models= (the export the server loads)")


def parse_readme(text: str, page: str = "README.md") -> list[Block]:
    """The fenced blocks of ``text`` (the page ``page``) with their markers (a marker applies to the next block
    only)."""
    blocks: list[Block] = []
    made: dict[str, Block] = {}
    lines = text.splitlines()
    section, marker, i = "top", None, 0
    while i < len(lines):
        line = lines[i]
        heading, found_marker, fence = HEADING.match(line), MARKER.match(line), FENCE.match(line)
        if heading:
            section, marker = heading["title"], None
        elif found_marker:
            marker = found_marker["body"]
        elif fence:
            end = next((j for j in range(i + 1, len(lines)) if lines[j].startswith("```")), len(lines))
            code = "\n".join(lines[i + 1 : end]) + "\n"
            block = Block(i + 1, fence["language"], code, section, marker, page)
            if marker is not None:
                _parse_options(block)
            for name in [n for n, export in block.models.items() if export == MADE]:
                if name in made:
                    block.made_by[name] = made[name]
                else:
                    block.problems.append(
                        f"models={name}: no earlier block of the page makes models/{name} (makes={name}) and no "
                        f"export stands for it; say {name}:EXPORT, EXPORT one of {', '.join(EXPORT_FIXTURES)}"
                    )
            made.update({name: block for name in block.makes})
            blocks.append(block)
            marker, i = None, end
        elif line.strip():
            marker = None  # a marker belongs to the block right below it
        i += 1
    return blocks


def _page_name(path: Path) -> str:
    return path.relative_to(ROOT).as_posix()


BLOCKS = [
    block
    for path in PAGES
    if path.is_file()
    for block in parse_readme(path.read_text(encoding="utf-8"), _page_name(path))
]
RUN_BLOCKS = [b for b in BLOCKS if b.language in RUNNABLE and b.action == "run"]


def _marks(block: Block) -> list[pytest.MarkDecorator]:
    marks = []
    exports = set(block.models.values())
    if exports & set(SLOW_EXPORTS):
        marks.append(pytest.mark.slow)
    if not block.extras and exports <= set(TORCH_FREE_EXPORTS):
        marks.append(pytest.mark.torch_free)
    return marks


@pytest.mark.torch_free
def test_every_block_says_whether_it_runs() -> None:
    assert RUN_BLOCKS, "the README has no block that runs"
    problems = []
    for block in BLOCKS:
        where = f"{block.where} ({block.section})"
        if not block.language:
            problems.append(f"{where}: give the fence a language (bash, python, or text for a synopsis)")
        elif block.language in RUNNABLE and block.marker is None:
            problems.append(f"{where}: add <!-- readme-test: run ... --> or <!-- readme-test: skip REASON --> above it")
        elif block.language not in RUNNABLE and block.marker is not None:
            problems.append(f"{where}: only {', '.join(RUNNABLE)} blocks run; drop the marker or change the language")
        problems += [f"{where}: {p}" for p in block.problems]
    assert not problems, "\n".join(problems)


def _prepare(block: Block, request: pytest.FixtureRequest, workdir: Path) -> dict[str, str]:
    """The block's working directory and environment: .venv, models/, PATH."""
    venv = Path(sys.prefix)
    if venv == Path(sys.base_prefix):
        pytest.skip("README blocks run from a venv; this Python is not in one")
    for extra in block.extras:
        if missing_modules(extra):
            pytest.skip(f"needs the {extra} extra ({', '.join(missing_modules(extra))} missing here)")
    missing = [name for name in block.modules if importlib.util.find_spec(name) is None]
    if missing:
        pytest.skip(f"needs {', '.join(missing)}, not installed here")
    (workdir / ".venv").symlink_to(venv, target_is_directory=True)
    for name in block.models:
        (workdir / "models").mkdir(exist_ok=True)
        (workdir / "models" / name).symlink_to(_model_folder(block, name, request))
    home = workdir.parent / f"{workdir.name}-home"
    home.mkdir()
    env = {"PATH": SYSTEM_PATH, "HOME": str(home), "LANG": "C.UTF-8", "HF_HUB_OFFLINE": "1"}
    env["TOKENIZERS_PARALLELISM"] = "false"
    if block.activated:
        env.update(PATH=f"{venv / 'bin'}:{SYSTEM_PATH}", VIRTUAL_ENV=str(venv))
    return env


def _free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port: int = probe.getsockname()[1]
        return port


class ReadmeServers:
    """``bertonnx serve models/NAME`` processes started for server blocks, one per (NAME, export)."""

    def __init__(self, root: Path) -> None:
        self.root = root
        self.started: dict[tuple[str, Path], tuple[subprocess.Popen[bytes], int]] = {}

    def port(self, name: str, export: Path) -> int:
        """The port of ``bertonnx serve models/NAME`` on ``export``, started (and ready) on first use."""
        if (name, export) not in self.started:
            self.started[(name, export)] = self._start(name, export)
        return self.started[(name, export)][1]

    def _start(self, name: str, export: Path) -> tuple[subprocess.Popen[bytes], int]:
        folder = self.root / f"server-{len(self.started)}"
        (folder / "models").mkdir(parents=True)
        (folder / "models" / name).symlink_to(export)
        port = _free_port()
        command = [str(Path(sys.prefix) / "bin" / "bertonnx"), "serve", f"models/{name}", "--port", str(port)]
        process = subprocess.Popen(command, cwd=folder, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        deadline = time.monotonic() + SERVER_READY_TIMEOUT_S
        while True:
            if process.poll() is not None:
                pytest.fail(f"`{' '.join(command)}` exited {process.returncode} before it was ready")
            try:
                with urllib.request.urlopen(f"http://127.0.0.1:{port}/ready", timeout=5) as answer:
                    if answer.status == 200:
                        return process, port
            except OSError:
                pass
            if time.monotonic() > deadline:
                process.kill()
                pytest.fail(f"`{' '.join(command)}` was not ready within {SERVER_READY_TIMEOUT_S} s")
            time.sleep(0.5)

    def stop(self) -> list[str]:
        """SIGTERM every server; the problems (a server that did not drain and exit 0)."""
        problems = []
        for (name, _), (process, _) in self.started.items():
            process.send_signal(signal.SIGTERM)
            try:
                code = process.wait(timeout=SERVER_DRAIN_TIMEOUT_S)
            except subprocess.TimeoutExpired:
                process.kill()
                code = None
            if code != 0:
                problems.append(f"bertonnx serve models/{name} exited {code} after SIGTERM (expected 0)")
        return problems


def _tiny_head_export(tmp_path_factory: pytest.TempPathFactory, name: str, **spec: object) -> Path:
    """A tiny seeded ``BertForSequenceClassification`` checkpoint (``tests/heads.py``) exported (fp32)."""
    from bertonnx_export.pipeline import ExportOptions, run_export

    from .heads import build_tiny_checkpoint

    root = tmp_path_factory.mktemp(name)
    checkpoint = build_tiny_checkpoint("BertForSequenceClassification", root / "checkpoint", **spec)  # type: ignore[arg-type]
    run_export(ExportOptions(outdir=root / "model", model=str(checkpoint), variants=("fp32",)), log=lambda m: None)
    return root / "model"


@pytest.fixture(scope="session")
def tiny_classifier_export(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The README's ``models/sentiment``: three labels (negative, neutral, positive)."""
    return _tiny_head_export(tmp_path_factory, "readme-classifier")


@pytest.fixture(scope="session")
def tiny_reranker_export(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The README's ``models/reranker``: a one-logit cross-encoder."""
    return _tiny_head_export(tmp_path_factory, "readme-reranker", num_labels=1)


@pytest.fixture(scope="session")
def readme_servers(tmp_path_factory: pytest.TempPathFactory) -> Iterator[ReadmeServers]:
    servers = ReadmeServers(tmp_path_factory.mktemp("readme-servers"))
    yield servers
    problems = servers.stop()
    assert not problems, "\n".join(problems)


def _server_port(block: Block, request: pytest.FixtureRequest) -> int:
    assert block.server is not None
    export = _model_folder(block, block.server, request)
    servers: ReadmeServers = request.getfixturevalue("readme_servers")
    return servers.port(block.server, export)


RUN_PYTHON = textwrap.dedent(
    """
    import ast, contextlib, io, json, sys
    path, results_path = sys.argv[1], sys.argv[2]
    source = open(path, encoding="utf-8").read()
    namespace = {"__name__": "__main__"}
    results = []
    for node in ast.parse(source).body:
        out = io.StringIO()
        with contextlib.redirect_stdout(out):
            exec(compile(ast.Module([node], []), path, "exec"), namespace)
        results.append({"end": node.end_lineno, "stdout": out.getvalue()})
        with open(results_path, "w", encoding="utf-8") as handle:
            json.dump(results, handle)
    """
)


def _shown_output(code: str, end_line: int) -> list[str]:
    """The comment lines right below line ``end_line`` (1-based), without their ``# ``."""
    shown = []
    for line in code.splitlines()[end_line:]:
        if not line.startswith("#"):
            break
        shown.append(line[2:] if line.startswith("# ") else line[1:])
    return shown


def _run_python(block: Block, workdir: Path, env: dict[str, str]) -> None:
    script, results = workdir / "readme_block.py", workdir.parent / f"{workdir.name}-results.json"
    script.write_text(block.code, encoding="utf-8")
    runner = workdir.parent / f"{workdir.name}-runner.py"
    runner.write_text(RUN_PYTHON, encoding="utf-8")
    python = workdir / ".venv" / "bin" / "python"
    result = subprocess.run(
        [str(python), str(runner), script.name, str(results)],
        cwd=workdir,
        env=env,
        capture_output=True,
        text=True,
        timeout=block.timeout,
    )
    assert result.returncode == 0, f"{block.where}: the python block failed:\n{result.stderr}"
    checked = 0
    for statement in json.loads(results.read_text(encoding="utf-8")):
        shown = _shown_output(block.code, statement["end"])
        if statement["stdout"] and shown:
            assert statement["stdout"].rstrip("\n").splitlines() == shown, (
                f"{block.page} line {block.line + statement['end']}: the block shows {shown}, "
                f"the code printed {statement['stdout']!r}"
            )
            checked += 1
    if any(line.lstrip().startswith("print(") for line in block.code.splitlines()):
        assert checked, f"{block.where}: its prints show no output to check"


def _run_bash(block: Block, workdir: Path, env: dict[str, str]) -> None:
    result = subprocess.run(
        ["bash", "--noprofile", "--norc", "-e", "-o", "pipefail", "-c", block.code],
        cwd=workdir,
        env=env,
        capture_output=True,
        text=True,
        timeout=block.timeout,
    )
    assert result.returncode == 0, (
        f"{block.where}: the bash block exited {result.returncode}:\n"
        f"--- stdout (end)\n{result.stdout[-3000:]}\n--- stderr (end)\n{result.stderr[-3000:]}"
    )


def _run_in(block: Block, request: pytest.FixtureRequest, workdir: Path) -> None:
    """Run ``block`` in the empty folder ``workdir`` (see the module docstring for what it holds)."""
    env = _prepare(block, request, workdir)
    if block.server is not None:
        address = f"127.0.0.1:{_server_port(block, request)}"
        block = dataclasses.replace(block, code=block.code.replace(README_SERVER, address))
    (_run_python if RUNNABLE[block.language] == "python" else _run_bash)(block, workdir, env)


class MadeFolders:
    """The working folders of the blocks that make model folders (``makes=NAME``), each run once per session."""

    def __init__(self, root: Path) -> None:
        self.root = root
        self.done: dict[str, Path] = {}
        self.failed: dict[str, str] = {}

    def workdir(self, block: Block, request: pytest.FixtureRequest) -> Path:
        """Where ``block`` ran (run now if it has not yet), holding ``models/NAME`` for each NAME it makes."""
        made = ", ".join(f"models/{name}" for name in block.makes)
        if block.name in self.failed:
            pytest.fail(f"{block.where}, which makes {made}, failed:\n{self.failed[block.name]}")
        if block.name not in self.done:
            workdir = Path(tempfile.mkdtemp(prefix=f"{block.name}-", dir=self.root)) / "work"
            workdir.mkdir()
            try:
                _run_in(block, request, workdir)
                missing = [name for name in block.makes if not (workdir / "models" / name).is_dir()]
                assert not missing, f"{block.where} ran but made no {', '.join(f'models/{n}' for n in missing)}"
            except Exception as exc:  # a skip (missing extra) is no Exception: it skips every user of the folders
                self.failed[block.name] = str(exc)
                raise
            self.done[block.name] = workdir
        return self.done[block.name]


@pytest.fixture(scope="session")
def made_folders(tmp_path_factory: pytest.TempPathFactory) -> MadeFolders:
    return MadeFolders(tmp_path_factory.mktemp("readme-made"))


def _model_folder(block: Block, name: str, request: pytest.FixtureRequest) -> Path:
    """The folder behind ``block``'s ``models/NAME``: a session export, or the one an earlier block made."""
    if block.models[name] == MADE:
        made: MadeFolders = request.getfixturevalue("made_folders")
        return made.workdir(block.made_by[name], request) / "models" / name
    return Path(request.getfixturevalue(EXPORT_FIXTURES[block.models[name]]))


@pytest.mark.parametrize("block", [pytest.param(b, id=b.name, marks=_marks(b)) for b in RUN_BLOCKS])
def test_readme_block_runs(block: Block, request: pytest.FixtureRequest, tmp_path: Path) -> None:
    assert not block.problems, block.problems
    if block.makes:  # run once per session: later blocks of its page use the folders it makes
        made: MadeFolders = request.getfixturevalue("made_folders")
        workdir = made.workdir(block, request)
    else:
        workdir = tmp_path / "work"
        workdir.mkdir()
        _run_in(block, request, workdir)
    assert os.listdir(workdir)  # the block ran where it was put (at least .venv is there)


@pytest.mark.torch_free
def test_the_readme_names_no_issue_numbers() -> None:
    """Readers cannot see the project's issue tracker."""
    for path in PAGES:
        assert not re.findall(r"(?i)\bissue\s*#?\d+", path.read_text(encoding="utf-8")), _page_name(path)


LINK = re.compile(r"\]\((?P<target>[^)\s]+)\)")


def _anchors(text: str) -> set[str]:
    """GitHub's anchors for the headings of a markdown page (fenced blocks skipped; repeats get -1, -2 ...)."""
    anchors: set[str] = set()
    in_fence = False
    for line in text.splitlines():
        if line.startswith("```"):
            in_fence = not in_fence
        elif not in_fence and (heading := HEADING.match(line)):
            slug = re.sub(r"[^\w\- ]", "", heading["title"].strip().lower()).replace(" ", "-")
            anchor, n = slug, 0
            while anchor in anchors:
                n += 1
                anchor = f"{slug}-{n}"
            anchors.add(anchor)
    return anchors


def _broken_links(path: Path, root: Path = ROOT) -> list[str]:
    """The relative links of the page at ``path`` whose file or heading does not exist."""
    name = path.relative_to(root).as_posix()
    broken = []
    text = path.read_text(encoding="utf-8")
    for match in LINK.finditer(text):
        target = match["target"]
        if re.match(r"[a-z]+:", target):
            continue  # http:, https:, mailto:
        file_part, _, anchor = target.partition("#")
        linked = (path.parent / file_part).resolve() if file_part else path
        if not linked.exists():
            broken.append(f"{name}: {target}: no such file")
        elif anchor and linked.suffix == ".md" and anchor not in _anchors(linked.read_text(encoding="utf-8")):
            broken.append(f"{name}: {target}: no heading with that anchor")
    return broken


def test_every_reference_page_is_linked_and_every_link_leads_somewhere() -> None:
    """Material moved out of the README stays reachable from it, and no link points at nothing (not torch_free:
    the runtime-only suite copies the pages without the files they link)."""
    readme = README.read_text(encoding="utf-8")
    unlinked = [_page_name(page) for page in DOCS if f"]({_page_name(page)}" not in readme]
    assert not unlinked, f"the README links none of {unlinked}"
    broken = [problem for path in PAGES for problem in _broken_links(path)]
    assert not broken, "\n".join(broken)


@pytest.mark.torch_free
def test_the_marker_parser_on_a_sample() -> None:
    sample = textwrap.dedent(
        """
        # Title
        <!-- readme-test: run models=bert-base-uncased:tiny activated -->
        ```bash
        bertonnx inspect models/bert-base-uncased
        ```
        <!-- readme-test: skip needs the hub -->

        ```python
        print(1)
        ```
        <!-- readme-test: run -->
        Some prose between the marker and the block: the marker does not apply.
        ```bash
        echo no marker
        ```
        ```text
        synopsis
        ```
        <!-- readme-test: run colour=blue -->
        ```bash
        true
        ```
        """
    )
    first, second, third, fourth, fifth = parse_readme(sample)
    assert (first.action, first.models, first.activated, first.line) == ("run", {"bert-base-uncased": "tiny"}, True, 4)
    assert (second.action, second.marker) == ("skip", "skip needs the hub")
    assert third.marker is None
    assert (fourth.language, fourth.marker) == ("text", None)
    assert fifth.problems == ["unknown option 'colour=blue' in <!-- readme-test: run colour=blue -->"]
    assert _shown_output("print(1)\n# 1\n# 2\nx = 1\n# not output\n", 1) == ["1", "2"]
    assert parse_readme(sample, "docs/page.md")[0].name == "page-line4-title"


@pytest.mark.torch_free
def test_a_page_makes_its_own_model_folders_before_it_uses_them() -> None:
    sample = textwrap.dedent(
        """
        # Tasks
        <!-- readme-test: run models=sentiment -->
        ```bash
        bertonnx classify models/sentiment "too early: nothing made it yet"
        ```
        <!-- readme-test: run makes=sentiment extras=export activated -->
        ```bash
        bertonnx export google/bert_uncased_L-2_H-128_A-2 models/sentiment --weights random
        ```
        <!-- readme-test: run models=sentiment,reranker,bert-base-uncased:tiny -->
        ```bash
        bertonnx classify models/sentiment "i loved this film"
        ```
        """
    )
    early, maker, user = parse_readme(sample)
    assert early.problems == [
        "models=sentiment: no earlier block of the page makes models/sentiment (makes=sentiment) and no export "
        f"stands for it; say sentiment:EXPORT, EXPORT one of {', '.join(EXPORT_FIXTURES)}"
    ]
    assert (maker.makes, maker.problems) == (["sentiment"], [])
    assert user.made_by == {"sentiment": maker}
    assert user.models == {"sentiment": MADE, "reranker": MADE, "bert-base-uncased": "tiny"}
    assert [p.split(":")[0] for p in user.problems] == ["models=reranker"]


@pytest.mark.torch_free
def test_the_link_checker_on_a_sample(tmp_path: Path) -> None:
    page = tmp_path / "page.md"
    page.write_text("# A `code` title\n## Again\n## Again\n```text\n# not a heading\n```\n", encoding="utf-8")
    assert _anchors(page.read_text(encoding="utf-8")) == {"a-code-title", "again", "again-1"}
    (tmp_path / "other.md").write_text(
        "[ok](page.md#again-1) [self](#x) [gone](missing.md) [web](https://example.org) [bad](page.md#not-a-heading)\n",
        encoding="utf-8",
    )
    problems = [p.split(": ", 1)[1] for p in _broken_links(tmp_path / "other.md", tmp_path)]
    assert problems == [
        "#x: no heading with that anchor",
        "missing.md: no such file",
        "page.md#not-a-heading: no heading with that anchor",
    ]
