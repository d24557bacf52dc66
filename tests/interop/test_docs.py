"""The documentation, tested: README.md and docs/**/*.md must stay true.

1. Links. Every relative link points at an existing file, and every `#anchor` (on the same
   page or another) is the slug of a heading of the target page, by GitHub's rules:
   lowercase, punctuation other than `-` and `_` dropped, spaces made `-`, and a repeated
   slug numbered `-1`, `-2`.
2. TOML. Every ```toml block parses, and passes `kshim config check --config FILE`, as does
   docker/kshim.toml. The example paths under /etc/kshim/ are
   rewritten to real certificates, keys, stores and secrets made here (EXAMPLE_FILES); a
   path the table does not know fails the test. $KSHIM_ADMIN_TOKEN and
   $KSHIM_KEYSTORE_PASSWORD are set.
3. Shell. Every ```sh, ```bash and ```console block is either run here or marked as not
   run, with a reason. A block followed by a ```text block (only blank lines between) has
   its output compared with it; a ```console block is a transcript (`$ command` lines,
   each followed by its output) and every command's output is compared.

Markers are HTML comments on the lines right above a fence:

    <!-- not run: REASON -->   a shell block this test does not run
    <!-- run: ENV -->          a shell block this test runs, in ENV (below)
    <!-- file: NAME -->        the block is written to NAME in the working directory of the
                               blocks run after it on the same page (a later one replaces it)
    <!-- fragment: REASON -->  a ```toml block that cannot stand alone: it is only parsed

ENV is one of:

    shell        nothing is started
    serve        a fresh `kshim serve` with the default config
    serve+admin  the same, plus [admin] with the token $KSHIM_ADMIN_TOKEN (also $TOKEN)
    serve FILE   `kshim serve --config FILE`, FILE from a `file:` block above on the page
    compose      docker/kshim.toml in front of the session's Kafka 4.1.1 broker
    upstream     `kshim serve --upstream BROKER --listen 127.0.0.1:19092` with flags only (no
                 config file) in front of the session's broker (localhost:9092 in the block);
                 node 1 on 127.0.0.1:19094

A block runs in a new temporary directory holding the page's files so far, with `kshim` on
PATH (a symlink to the binary under test). ```sh and ```bash blocks run with
`bash -euo pipefail` and, without a ```text block after them, must exit 0. Transcripts run
with `bash -uo pipefail`, since they may show a command failing.

Substitutions, made in the block before it runs and undone in its output before comparing:
the documented addresses (`127.0.0.1:9092` and `localhost:9092`, or the `listen` of
`serve FILE`; `localhost:19092` for compose; the admin API's `127.0.0.1:9880`, or the
file's `admin.listen`) become the ports chosen here, and `/etc/kshim/` becomes the directory
of the generated files. In the compose environment the epoch (`Epoch: N`) is the broker's,
so epochs are not compared there. In expected output, a line `...` stands for any lines, and
`...` within a line for any text.
"""

from __future__ import annotations

import os
import re
import shutil
import signal
import subprocess
import tempfile
import time
import tomllib
from dataclasses import dataclass, field
from pathlib import Path

import pytest

import kafka_env as ke
import tls_support as ts

REPO = ke.REPO_ROOT
DOC_FILES = [REPO / "README.md", *sorted((REPO / "docs").rglob("*.md"))]
SHELL_LANGS = {"sh", "bash", "console"}
ENVS = ("shell", "serve", "serve+admin", "serve FILE", "compose", "upstream")
BLOCK_TIMEOUT_S = 60
ADMIN_TOKEN = "docs-test-token"
EXAMPLE_DIR = "/etc/kshim/"

_FENCE = re.compile(r"^(\s*)(`{3,})\s*([\w+-]*)\s*$")
_MARKER = re.compile(r"^\s*<!--\s*(not run|run|file|fragment)\s*:\s*(.*?)\s*-->\s*$")
_ANY_COMMENT = re.compile(r"^\s*<!--.*-->\s*$")
_HEADING = re.compile(r"^(#{1,6})\s+(.*?)\s*#*\s*$")
_LINK = re.compile(r"(?<!!)\[([^\]]*)\]\(([^)\s]+)(?:\s+\"[^\"]*\")?\)")


@dataclass
class Block:
    path: Path
    line: int  # 1-based line of the opening fence
    lang: str
    text: str
    markers: dict[str, str] = field(default_factory=dict)
    output: "Block | None" = None  # the ```text block right after it
    end: int = 0  # 1-based line of the closing fence

    @property
    def where(self) -> str:
        return f"{self.path.relative_to(REPO)}:{self.line}"


@dataclass
class Page:
    path: Path
    blocks: list[Block]
    prose: list[tuple[int, str]]  # (line number, text) outside code blocks


def parse_page(path: Path) -> Page:
    lines = path.read_text().splitlines()
    blocks: list[Block] = []
    prose: list[tuple[int, str]] = []
    i = 0
    while i < len(lines):
        m = _FENCE.match(lines[i])
        if not m:
            prose.append((i + 1, lines[i]))
            i += 1
            continue
        indent, ticks, lang = m.group(1), m.group(2), m.group(3).lower()
        start = i
        body = []
        i += 1
        while i < len(lines) and not re.match(rf"^\s*{ticks}\s*$", lines[i]):
            line = lines[i]
            body.append(line[len(indent):] if line.startswith(indent) else line.lstrip())
            i += 1
        if i >= len(lines):
            raise AssertionError(f"{path.relative_to(REPO)}:{start + 1}: code block never closed")
        i += 1
        markers: dict[str, str] = {}
        j = start - 1
        while j >= 0 and _ANY_COMMENT.match(lines[j]):
            mm = _MARKER.match(lines[j])
            if not mm:
                raise AssertionError(f"{path.relative_to(REPO)}:{j + 1}: unknown marker {lines[j].strip()}")
            markers[mm.group(1)] = mm.group(2)
            j -= 1
        blocks.append(Block(path, start + 1, lang, "\n".join(body) + "\n", markers, end=i))
    # A ```text block after a shell block, with only blank lines between, is its output.
    for a, b in zip(blocks, blocks[1:]):
        if a.lang in SHELL_LANGS and b.lang == "text":
            between = lines[a.end: b.line - 1]  # the lines after a's closing fence, before b's opening one
            if all(not l.strip() for l in between):
                a.output = b
    return Page(path, blocks, prose)


PAGES = [parse_page(p) for p in DOC_FILES]


# --------------------------------------------------------------------------------------------
# 1. links


def slugs(page: Page) -> set[str]:
    seen: dict[str, int] = {}
    out = set()
    for _, line in page.prose:
        m = _HEADING.match(line)
        if not m:
            continue
        text = m.group(2)
        text = re.sub(r"!?\[([^\]]*)\]\([^)]*\)", r"\1", text)  # links keep their text
        text = text.replace("`", "")
        slug = re.sub(r"[^\w\- ]", "", text.lower()).replace(" ", "-")
        n = seen.get(slug, 0)
        seen[slug] = n + 1
        out.add(slug if n == 0 else f"{slug}-{n}")
    return out


def test_links_and_anchors_resolve():
    by_path = {p.path.resolve(): p for p in PAGES}
    problems = []
    for page in PAGES:
        for lineno, line in page.prose:
            line = re.sub(r"`[^`]*`", "", line)  # inline code is not a link
            for m in _LINK.finditer(line):
                target = m.group(2)
                if re.match(r"^[a-z][a-z0-9+.-]*:", target):  # https:, mailto:
                    continue
                file_part, _, anchor = target.partition("#")
                dest = (page.path.parent / file_part).resolve() if file_part else page.path.resolve()
                where = f"{page.path.relative_to(REPO)}:{lineno}: ({target})"
                if not dest.exists():
                    problems.append(f"{where}: {file_part} does not exist")
                    continue
                if anchor:
                    if dest.suffix != ".md":
                        problems.append(f"{where}: an anchor into a file that is not markdown")
                        continue
                    target_page = by_path.get(dest) or parse_page(dest)
                    if anchor not in slugs(target_page):
                        problems.append(f"{where}: no heading with the slug #{anchor} in {dest.relative_to(REPO)}")
    assert not problems, "broken links:\n" + "\n".join(problems)


# --------------------------------------------------------------------------------------------
# example files: what the examples' /etc/kshim/ paths point at

KEYSTORE_PASSWORD = ts.STORE_PASSWORD
ROTATED_PASSWORD = "docs-2027"  # the rotated keystore's own password, unlike the file's


def make_example_files(root: Path) -> Path:
    """A directory standing for /etc/kshim/, holding every file the examples name."""
    made = root / "made"
    certs = ts.make_certs(made)
    ts.export_pkcs12(made, "server", certs.ca)
    ts.issue(made, "server-2027", "localhost", certs.ca, certs.ca_key, "server_ext")
    ts.export_pkcs12(made, "server-2027", certs.ca, password=ROTATED_PASSWORD)
    etc = root / "etc-kshim"
    (etc / "secrets").mkdir(parents=True)
    copies = {
        "server.pem": certs.server,
        "server.key": certs.server_key,
        "server.p12": made / "server.p12",
        "server-2027.p12": made / "server-2027.p12",
        "admin.pem": certs.server,
        "admin.key": certs.server_key,
        "clients-ca.pem": certs.ca,
        "ops-ca.pem": certs.ca,
        "kafka-ca.pem": certs.ca,
        "truststore.p12": certs.truststore,
        "kafka-truststore.p12": certs.truststore,
        "kshim-client.p12": certs.alice_keystore,
    }
    for name, src in copies.items():
        shutil.copy(src, etc / name)
    (etc / "secrets" / "2027.properties").write_text(f"password={ROTATED_PASSWORD}\n")
    (etc / "secrets" / "kshim.properties").write_text(f"keystore.password={KEYSTORE_PASSWORD}\n")
    return etc


EXAMPLE_FILES = {
    "server.pem", "server.key", "server.p12", "server-2027.p12", "admin.pem", "admin.key",
    "clients-ca.pem", "ops-ca.pem", "kafka-ca.pem", "truststore.p12", "kafka-truststore.p12",
    "kshim-client.p12", "secrets", "secrets/2027.properties", "secrets/kshim.properties",
}


def example_paths(text: str) -> set[str]:
    return {m.group(1).rstrip(".") for m in re.finditer(r"/etc/kshim/([\w./-]*[\w])", text)}


@pytest.fixture(scope="module")
def etc_kshim(tmp_path_factory) -> Path:
    return make_example_files(tmp_path_factory.mktemp("docs-etc"))


def doc_env(extra: dict | None = None) -> dict:
    env = dict(os.environ)
    env.update({
        "KSHIM_ADMIN_TOKEN": ADMIN_TOKEN,
        "TOKEN": ADMIN_TOKEN,
        "KSHIM_KEYSTORE_PASSWORD": KEYSTORE_PASSWORD,
        "NO_COLOR": "1",
    })
    env.update(extra or {})
    return env


def with_examples(text: str, etc: Path) -> str:
    return text.replace(EXAMPLE_DIR, f"{etc}/")


# --------------------------------------------------------------------------------------------
# 2. TOML


def test_example_paths_are_known():
    unknown = []
    for page in PAGES:
        for b in page.blocks:
            for p in example_paths(b.text) - EXAMPLE_FILES:
                unknown.append(f"{b.where}: /etc/kshim/{p}")
    assert not unknown, "example paths with no generated file (add them to EXAMPLE_FILES):\n" + "\n".join(unknown)


def test_toml_examples_load(kshim_binary, etc_kshim, tmp_path):
    problems = []
    checked = 0
    toml_blocks = [b for p in PAGES for b in p.blocks if b.lang == "toml"]
    assert toml_blocks, "no TOML examples found"
    for n, b in enumerate(toml_blocks):
        try:
            tomllib.loads(b.text)
        except tomllib.TOMLDecodeError as e:
            problems.append(f"{b.where}: not TOML: {e}")
            continue
        if "fragment" in b.markers:
            if not b.markers["fragment"]:
                problems.append(f"{b.where}: a fragment marker needs a reason")
            continue
        f = tmp_path / f"example-{n}.toml"
        f.write_text(with_examples(b.text, etc_kshim))
        cp = subprocess.run([str(kshim_binary), "config", "check", "--config", str(f)], capture_output=True,
                            text=True, timeout=30, env=doc_env(), cwd=tmp_path)
        checked += 1
        if cp.returncode != 0:
            problems.append(f"{b.where}: kshim config check exited {cp.returncode}:\n{cp.stdout}{cp.stderr}")
    # The compose files' configs, with what their compose files put in the environment.
    compose_env = doc_env({"KSHIM_HOST": "kshim-1", "KSHIM_INSTANCE_ID": "kshim-1"})
    for config in (REPO / "docker" / "kshim.toml", REPO / "docker" / "cluster" / "kshim.toml"):
        cp = subprocess.run([str(kshim_binary), "config", "check", "--config", str(config)], capture_output=True,
                            text=True, timeout=30, env=compose_env, cwd=tmp_path)
        checked += 1
        if cp.returncode != 0:
            problems.append(f"{config.relative_to(REPO)}: kshim config check exited {cp.returncode}:\n"
                            f"{cp.stdout}{cp.stderr}")
    assert not problems, f"{len(problems)} of {checked} TOML configs do not load:\n" + "\n\n".join(problems)


# --------------------------------------------------------------------------------------------
# 3. shell blocks


def test_every_shell_block_is_run_or_marked():
    problems = []
    for page in PAGES:
        for b in page.blocks:
            if b.lang in SHELL_LANGS:
                run, not_run = b.markers.get("run"), b.markers.get("not run")
                if run is None and not_run is None:
                    problems.append(f"{b.where}: neither <!-- run: ENV --> nor <!-- not run: reason -->")
                elif run is not None and not_run is not None:
                    problems.append(f"{b.where}: both run and not run")
                elif not_run is not None and not not_run:
                    problems.append(f"{b.where}: <!-- not run --> needs a reason")
                elif run is not None and env_kind(run) not in ENVS:
                    problems.append(f"{b.where}: unknown environment {run!r} (one of {', '.join(ENVS)})")
            else:
                if "run" in b.markers or "not run" in b.markers:
                    problems.append(f"{b.where}: a run marker on a ```{b.lang} block")
            if "fragment" in b.markers and b.lang != "toml":
                problems.append(f"{b.where}: a fragment marker on a ```{b.lang} block")
    assert not problems, "\n".join(problems)


def env_kind(run: str) -> str:
    return "serve FILE" if run.startswith("serve ") and run != "serve+admin" else run


def runnable() -> list[tuple[Page, Block]]:
    return [(p, b) for p in PAGES for b in p.blocks if b.lang in SHELL_LANGS and "run" in b.markers]


@dataclass
class Env:
    """What a block runs against: text substitutions (doc text -> here), undone in output."""

    subs: list[tuple[str, str]] = field(default_factory=list)
    ports: list[tuple[int, int]] = field(default_factory=list)  # (port here, documented port)
    normalize_epoch: bool = False

    def address(self, doc: str, here: str) -> None:
        self.subs.append((doc, here))
        self.ports.append((int(here.rsplit(":", 1)[1]), int(doc.rsplit(":", 1)[1])))

    def apply(self, text: str) -> str:
        for doc, here in self.subs:
            text = text.replace(doc, here)
        return text

    def undo(self, text: str) -> str:
        for doc, here in self.subs:
            text = text.replace(here, doc)
        for here, doc in self.ports:
            text = re.sub(rf"(?<!\d){here}(?!\d)", str(doc), text)
        return text


def page_files(page: Page, before: Block) -> dict[str, str]:
    files: dict[str, str] = {}
    for b in page.blocks:
        if b is before:
            break
        if "file" in b.markers:
            files[b.markers["file"]] = b.text
    return files


def admin_listen(doc: dict) -> str | None:
    admin = doc.get("admin")
    if admin is None:
        return None
    return admin.get("listen", "127.0.0.1:9880")


def with_admin_port(config: str, port: int) -> str:
    """The config with [admin] listening on 127.0.0.1:PORT."""
    lines = config.splitlines()
    out, in_admin = [], False
    for line in lines:
        header = re.match(r"^\s*\[+\s*([^\]]+?)\s*\]+", line)
        if header:
            in_admin = header.group(1) == "admin"
            out.append(line)
            if in_admin:
                out.append(f'listen = "127.0.0.1:{port}"')
            continue
        if in_admin and re.match(r"^\s*listen\s*=", line):
            continue
        out.append(line)
    return "\n".join(out) + "\n"


def start_env(run: str, page: Page, block: Block, request, kshim_factory, etc: Path) -> Env:
    env = Env()
    env.subs.append((EXAMPLE_DIR, f"{etc}/"))
    kind = env_kind(run)
    extra_env = doc_env()
    if kind == "shell":
        return env
    if kind in ("serve", "serve+admin"):
        config = ""
        if kind == "serve+admin":
            port = ke.free_port()
            config = f'[admin]\nlisten = "127.0.0.1:{port}"\ntoken = "${{env:KSHIM_ADMIN_TOKEN}}"\n'
            env.address("127.0.0.1:9880", f"127.0.0.1:{port}")
        # The documentation shows kshim's defaults: the newest Kafka release.
        proc = kshim_factory(config, env=extra_env, kafka_release=None)
        env.address("127.0.0.1:9092", proc.bootstrap)
        env.address("localhost:9092", proc.bootstrap)
        return env
    if kind == "serve FILE":
        name = run.split(" ", 1)[1].strip()
        files = page_files(page, block)
        assert name in files, f"{block.where}: no <!-- file: {name} --> block above it on the page"
        text = files[name]
        doc = tomllib.loads(text)
        config = with_examples(text, etc)
        doc_admin = admin_listen(doc)
        if doc_admin is not None:
            port = ke.free_port()
            config = with_admin_port(config, port)
            env.address(doc_admin, f"127.0.0.1:{port}")
        # kshim_factory's process passes its own --listen and --data-dir, over the file's.
        proc = kshim_factory(config, env=extra_env, kafka_release=None)
        listen = doc.get("listen", "127.0.0.1:9092")
        env.address(listen, proc.bootstrap)
        if listen.startswith("127.0.0.1:"):
            env.address(listen.replace("127.0.0.1:", "localhost:"), proc.bootstrap)
        return env
    if kind == "compose":
        kafka = request.getfixturevalue("kafka_broker")
        admin_port, node_port = ke.free_ports(2)
        text = (REPO / "docker" / "kshim.toml").read_text()
        replacements = [
            ('listen = "0.0.0.0:19092"', 'listen = "127.0.0.1:19092"'),  # --listen overrides the port
            ('bootstrap = "kafka:9092"', f'bootstrap = "{kafka.bootstrap}"'),
            ('host = "0.0.0.0"', 'host = "127.0.0.1"'),
            ("port_base = 19100", f"port_base = {node_port - 1}"),  # the broker is node 1
            ('listen = "0.0.0.0:9880"', f'listen = "127.0.0.1:{admin_port}"'),
        ]
        for old, new in replacements:
            assert text.count(old) == 1, f"docker/kshim.toml no longer has {old!r} once; update this test"
            text = text.replace(old, new)
        proc = kshim_factory(text, upstream=kafka.bootstrap, listener_ports={1: node_port}, env=extra_env)
        env.address("localhost:19092", proc.bootstrap)
        env.address("127.0.0.1:9880", f"127.0.0.1:{admin_port}")
        env.normalize_epoch = True
        return env
    if kind == "upstream":
        kafka = request.getfixturevalue("kafka_broker")
        # Flags only, as the README runs it: the bootstrap on PORT and node 1 on PORT + 2.
        port = ke.free_port(following=2)
        data = Path(tempfile.mkdtemp(prefix="kshim-docs-"))
        log = open(data / "kshim.log", "wb")
        proc = subprocess.Popen([str(ke.require_kshim_binary()), "serve", "--upstream", kafka.bootstrap,
                                 "--listen", f"127.0.0.1:{port}", "--data-dir", str(data / "state")],
                                stdout=log, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL)
        request.addfinalizer(lambda: (ke.stop_process(proc, sig=signal.SIGINT), log.close()))
        assert ke.wait_until(lambda: ke.port_accepts("127.0.0.1", port)
                             and 0 in ke.api_versions(f"127.0.0.1:{port}").api_keys, 30), \
            (data / "kshim.log").read_text()[-2000:]
        env.address("127.0.0.1:19092", f"127.0.0.1:{port}")
        env.address("127.0.0.1:19094", f"127.0.0.1:{port + 2}")
        env.address("localhost:9092", kafka.bootstrap)
        return env
    raise AssertionError(f"{block.where}: unknown environment {run!r}")


def expected_regex(expected: str) -> re.Pattern:
    parts = []
    for line in expected.splitlines():
        if line.strip() == "...":
            parts.append(r"(?:[^\n]*\n)*?")
        else:
            parts.append(re.escape(line).replace(re.escape("..."), ".*?") + r"\n")
    return re.compile("".join(parts), re.S)


def tidy(text: str) -> str:
    lines = [l.rstrip() for l in text.replace("\r\n", "\n").split("\n")]
    while lines and not lines[0]:
        lines.pop(0)
    while lines and not lines[-1]:
        lines.pop()
    return "\n".join(lines) + "\n" if lines else ""


def compare(where: str, got: str, expected: str, env: Env, what: str) -> None:
    got, expected = tidy(env.undo(got)), tidy(expected)
    if env.normalize_epoch:
        got = re.sub(r"Epoch: \d+", "Epoch: N", got)
        expected = re.sub(r"Epoch: \d+", "Epoch: N", expected)
    if not expected_regex(expected).fullmatch(got):
        raise AssertionError(f"{where}: {what}: the output differs from the documentation\n"
                             f"--- documented\n{expected}--- got\n{got}")


def transcript(text: str) -> list[tuple[str, str]]:
    """(command, expected output) for each `$ ` line of a console block."""
    steps: list[tuple[str, list[str]]] = []
    lines = text.splitlines()
    i = 0
    while i < len(lines):
        line = lines[i]
        if line.startswith("$ "):
            cmd = [line[2:]]
            while cmd[-1].endswith("\\") and i + 1 < len(lines):
                i += 1
                cmd.append(lines[i])
            steps.append(("\n".join(cmd), []))
        else:
            assert steps, f"output before the first `$ ` command: {line!r}"
            steps[-1][1].append(line)
        i += 1
    return [(c, "\n".join(o) + "\n") for c, o in steps]


def run_bash(script: str, *, errexit: bool, cwd: Path, env: dict) -> subprocess.CompletedProcess:
    """bash -[e]uo pipefail, stdout and stderr in one stream, in the order written."""
    flags = "-euo" if errexit else "-uo"
    return subprocess.run(["bash", flags, "pipefail", "-c", script], cwd=cwd, env=env, stdout=subprocess.PIPE,
                          stderr=subprocess.STDOUT, text=True, timeout=BLOCK_TIMEOUT_S, stdin=subprocess.DEVNULL)


@pytest.fixture(scope="module")
def kshim_on_path(kshim_binary, tmp_path_factory) -> Path:
    bindir = tmp_path_factory.mktemp("docs-bin")
    (bindir / "kshim").symlink_to(kshim_binary)
    return bindir


def shell_block_params() -> list:
    """Each runnable block; those run in front of the Kafka broker are marked `broker`."""
    return [
        pytest.param(page, block, id=block.where,
                     marks=[pytest.mark.broker] if env_kind(block.markers["run"]) in ("compose", "upstream") else [])
        for page, block in runnable()
    ]


@pytest.mark.parametrize("page,block", shell_block_params())
def test_shell_block(page, block, request, kshim_factory, kshim_on_path, etc_kshim, tmp_path):
    env = start_env(block.markers["run"], page, block, request, kshim_factory, etc_kshim)
    for name, text in page_files(page, block).items():
        dest = tmp_path / name
        dest.parent.mkdir(parents=True, exist_ok=True)
        dest.write_text(with_examples(text, etc_kshim))
    shell_env = doc_env({"PATH": f"{kshim_on_path}{os.pathsep}{os.environ.get('PATH', '')}"})
    script = env.apply(block.text)
    if block.lang == "console":
        steps = transcript(script)
        assert steps, f"{block.where}: a console block without `$ ` commands"
        expected_steps = transcript(block.text)
        marks = [f"@@docs-step-{n}-{time.monotonic_ns()}@@" for n in range(len(steps))]
        # Each command's output follows a mark; $? survives the mark, for `echo $?`.
        body = "".join(f"__rc=$?; printf '\\n%s\\n' '{m}'; (exit $__rc)\n{cmd}\n" for m, (cmd, _) in zip(marks, steps))
        out = run_bash(body, errexit=False, cwd=tmp_path, env=shell_env).stdout
        for n, (m, (cmd, _)) in enumerate(zip(marks, expected_steps)):
            start = out.index(m) + len(m)
            end = out.index(marks[n + 1]) if n + 1 < len(marks) else len(out)
            compare(block.where, out[start:end], expected_steps[n][1], env, f"`$ {cmd}`")
        return
    cp = run_bash(script, errexit=True, cwd=tmp_path, env=shell_env)
    if block.output is not None:
        compare(block.where, cp.stdout, block.output.text, env, "the block")
    else:
        assert cp.returncode == 0, f"{block.where}: exited {cp.returncode}\n--- output\n{cp.stdout}"


def test_the_grafana_dashboard_is_linked_where_operators_look():
    """deploy/grafana/kshim-dashboard.json is linked from the README and from metrics.md."""
    for page, link in [(REPO / "README.md", "deploy/grafana/kshim-dashboard.json"),
                       (REPO / "docs" / "reference" / "metrics.md", "../../deploy/grafana/kshim-dashboard.json")]:
        assert f"]({link})" in page.read_text(), f"{page.name} does not link {link}"
    assert (REPO / "deploy" / "grafana" / "kshim-dashboard.json").is_file()


def test_the_readme_run_and_test_section_is_named_for_what_it_holds():
    """The README's first section lists the commands to run and to test kshim; its heading
    says so rather than counting them."""
    text = (REPO / "README.md").read_text()
    section = text.split("## Run and test", 1)[1].split("\n## ", 1)[0]
    commands = [l for l in section.split("```sh", 1)[1].split("```", 1)[0].splitlines() if l.strip()]
    assert any("serve" in c for c in commands) and any("scripts/test.sh" in c for c in commands), commands
    assert "## The two commands" not in text
