"""The docs and what the programs print speak the user's language.

No work-item numbers, no internal names ("seed 000", "the seed example"), no
links outside the repository (``../shared/…``, a design file it does not
have), no commit hashes standing in for dates; every relative link in
README.md and docs/ opens a file of the repository, at a heading it has; the
code's comments cite the design in the repository (docs/ARCHITECTURE.md).
GPUScaler.md opens with its field tables and a complete vLLM example.
"""

from __future__ import annotations

import ast
import copy
import re
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml

from gpuscale_cli.main import COMMANDS
from gpuscale_cli.main import main as gpuscale
from gpuscale_collector.core.engines import PORT_ANNOTATION
from gpuscale_kubesim import KubeSim

REPO = Path(__file__).resolve().parents[2]
# Records, not guides: they may tell which work item a figure or a change came with.
RECORDS = {"docs/BENCHMARKS.md", "CHANGELOG.md"}
ARCHITECTURE = "docs/ARCHITECTURE.md"

# What "seed" may rightly mean: an nkey seed (NATS), a random generator's seed.
ALLOWED_SEED = re.compile(r"(?i)issuer-seed|nkey seeds?|--seed( SEED)?\b|seed of the noise generator")
INTERNAL = {
    "an internal name (seed)": re.compile(r"(?i)\bseeds?\b"),
    "a work-item number": re.compile(r"(?i)\bissues?[ -]#?\d+|\bissues \d+(, \d+)*\b"),
    "a path outside the repository": re.compile(r"\.\./shared|/work/shared"),
    "a design file the repository does not have": re.compile(r"\bDESIGN(\.md)?\b|§"),
}
COMMIT_HASH = re.compile(r"(?<![\w/.#-])(?=[0-9a-f]*\d)(?=[0-9a-f]*[a-f])[0-9a-f]{7,40}(?![\w-])")
# A user-facing message tells what is, not which release brought it.
RELEASE_HISTORY = re.compile(
    r"(?i)\breleased? before\b|\bpredates?\b|\bfrom before (these|this|the)\b|\b(older|earlier) (release|version)s?\b"
)
# Outputs of a run (not in the repository until one is made), and kubectl's kind/name.
# Made by a run or by the user as the docs say (the install copies an overlay there; .gitignore).
WRITTEN_BY_A_RUN = ("bench/out/", "deploy/overlays/local")
KUBECTL_NAME = re.compile(r"deploy/gpuscale-[\w-]+")
# How a comment cites a section of a design document.
CITATION = re.compile(r"DESIGN(\.md)?('s)? ?§ ?\d+|DESIGN\.md's|§ ?\d+")
LINK = re.compile(r"(?<!!)\[[^\]]*\]\(([^)\s]+)\)")
REPO_PATH = re.compile(
    r"(?<![\w/.:-])((?:docs|deploy|services|shared|tests|bench|cli|kubesim|docker)/[\w./*<>-]*[\w*/>])"
)


def user_docs(root: Path = REPO) -> list[Path]:
    """README.md and every text file under docs/."""
    docs = [p for p in (root / "docs").rglob("*") if p.suffix in (".md", ".yaml", ".yml")]
    return [root / "README.md", *sorted(docs)]


def internal_language(text: str, record: bool = False) -> list[str]:
    """Each piece of internal language in ``text``, with what it is."""
    found: list[str] = []
    cleaned = ALLOWED_SEED.sub("", text)
    for what, pattern in INTERNAL.items():
        if record and what == "a work-item number":
            continue
        found += [f"{what}: {m.group(0)!r}" for m in pattern.finditer(cleaned)]
    if not record:
        found += [f"a commit hash: {m.group(0)!r}" for m in COMMIT_HASH.finditer(cleaned)]
    return found


def slug(heading: str) -> str:
    """The anchor GitHub gives a heading."""
    return re.sub(r"[^\w\- ]", "", heading.strip().lower()).replace(" ", "-")


def anchors(doc: Path) -> set[str]:
    return {slug(h) for h in re.findall(r"^#+ (.+)$", doc.read_text(), re.M)}


def broken_links(doc: Path, root: Path = REPO) -> list[str]:
    """Relative links of ``doc`` that open no file of the repository, or no heading of it."""
    broken: list[str] = []
    for target in LINK.findall(doc.read_text()):
        if re.match(r"[a-z]+:", target):
            continue  # http(s), mailto: the public web
        path, _, fragment = target.partition("#")
        where = (doc.parent / path).resolve() if path else doc
        if not where.exists() or root.resolve() not in (where, *where.parents):
            broken.append(f"{target}: no such file in the repository")
        elif fragment and where.suffix == ".md" and fragment not in anchors(where):
            broken.append(f"{target}: no heading #{fragment}")
    return broken


def missing_paths(text: str, root: Path = REPO) -> list[str]:
    """Repository paths named in ``text`` (``deploy/base``, ``tests/*/test_*.py``) that do not exist."""
    missing: list[str] = []
    for name in REPO_PATH.findall(text):
        if "<" in name or "..." in name or name.startswith(WRITTEN_BY_A_RUN) or KUBECTL_NAME.fullmatch(name):
            continue  # a placeholder (deploy/overlays/<platform>), an output, `kubectl logs deploy/<name>`
        name = name.rstrip(".")
        if not (list(root.glob(name)) if "*" in name else (root / name).exists()):
            missing.append(name)
    return missing


def _relative(doc: Path, root: Path = REPO) -> str:
    return doc.relative_to(root).as_posix()


# --- the docs ------------------------------------------------------------------------


@pytest.mark.parametrize("doc", user_docs(), ids=_relative)
def test_a_doc_speaks_the_users_language(doc: Path) -> None:
    found = internal_language(doc.read_text(), record=_relative(doc) in RECORDS)
    assert found == [], f"{_relative(doc)}: {found}"


def test_the_changelog_points_nowhere_outside_the_repository() -> None:
    text = (REPO / "CHANGELOG.md").read_text()
    assert INTERNAL["a path outside the repository"].findall(text) == []
    assert broken_links(REPO / "CHANGELOG.md") == []


@pytest.mark.parametrize("doc", [d for d in user_docs() if d.suffix == ".md"], ids=_relative)
def test_every_relative_link_opens_a_file_of_the_repository(doc: Path) -> None:
    assert broken_links(doc) == [], _relative(doc)


@pytest.mark.parametrize("doc", user_docs(), ids=_relative)
def test_every_path_a_doc_names_is_in_the_repository(doc: Path) -> None:
    assert missing_paths(doc.read_text()) == [], _relative(doc)


def test_the_checks_see_what_they_look_for(tmp_path: Path) -> None:
    """Each check finds its own kind of mistake, and leaves the allowed words alone."""
    bad = (
        "Apply the seed example. See seed 000 and issue 14, issues 11, 14, "
        "../shared/seeds/, DESIGN.md §4, measured on d85b93a."
    )
    kinds = {line.split(":")[0] for line in internal_language(bad)}
    assert kinds == {*INTERNAL, "a commit hash"}
    assert internal_language("issue 14 on d85b93a", record=True) == []
    fine = "the issuer-seed key, an nkey seed, kube-sim --seed, a public issue, image sha 58ecbfb07c7ae7056a96a3b1-x"
    assert internal_language(fine) == []
    assert RELEASE_HISTORY.search("one released before per-GPUScaler windows")

    (tmp_path / "docs").mkdir()
    (tmp_path / "docs" / "A.md").write_text("# A title\n\n## Wire contract\n")
    doc = tmp_path / "README.md"
    doc.write_text(
        "[ok](docs/A.md#wire-contract) [web](https://x.io) [self](#top)\n"
        "[gone](docs/B.md) [anchor](docs/A.md#nope) [out](../shared/DESIGN.md)\n# Top\n"
    )
    assert [b.split(":")[0] for b in broken_links(doc, tmp_path)] == [
        "docs/B.md",
        "docs/A.md#nope",
        "../shared/DESIGN.md",
    ]
    assert missing_paths("`docs/A.md`, docs/Z.md, deploy/overlays/<platform>", tmp_path) == ["docs/Z.md"]


# --- the design the code cites -------------------------------------------------------


def _python_files() -> Iterator[Path]:
    for top in ("shared", "services", "cli", "kubesim", "bench", "tests"):
        yield from (p for p in (REPO / top).rglob("*.py") if "_pb2" not in p.name)


def test_code_cites_the_design_in_the_repository() -> None:
    """Comments and docstrings point at docs/ARCHITECTURE.md's sections, which exist, and at no
    work item or file outside the repository."""
    sections = anchors(REPO / ARCHITECTURE)
    wrong: list[str] = []
    for path in _python_files():
        if path == Path(__file__):
            continue
        text = path.read_text()
        for pattern in (CITATION, INTERNAL["a work-item number"], INTERNAL["a path outside the repository"]):
            wrong += [f"{_relative(path)}: {m.group(0)}" for m in pattern.finditer(text)]
        wrong += [
            f"{_relative(path)}: #{m.group(1)}"
            for m in re.finditer(r"ARCHITECTURE\.md#([\w-]+)", text)
            if m.group(1) not in sections
        ]
    assert wrong == []


# --- what the programs print ---------------------------------------------------------


def _help(argv: list[str], capsys: pytest.CaptureFixture[str]) -> str:
    with pytest.raises(SystemExit) as exited:
        gpuscale(argv)
    assert exited.value.code == 0
    return capsys.readouterr().out


def test_every_command_s_help_speaks_the_users_language(capsys: pytest.CaptureFixture[str]) -> None:
    texts = {"gpuscale --help": _help(["--help"], capsys)}
    texts |= {f"gpuscale {c.name} --help": _help([c.name, "--help"], capsys) for c in COMMANDS}
    for command, text in texts.items():
        assert "usage:" in text, command
        assert internal_language(text) == [], command
        assert RELEASE_HISTORY.findall(text) == [], command


def _messages(path: Path) -> Iterator[tuple[int, str]]:
    """The string literals of a module that are not docstrings (f-strings' literal parts included)."""
    tree = ast.parse(path.read_text())
    docstrings = {
        id(node.body[0].value)
        for node in ast.walk(tree)
        if isinstance(node, ast.Module | ast.ClassDef | ast.FunctionDef | ast.AsyncFunctionDef)
        and node.body
        and isinstance(node.body[0], ast.Expr)
        and isinstance(node.body[0].value, ast.Constant)
    }
    for node in ast.walk(tree):
        if isinstance(node, ast.Constant) and isinstance(node.value, str) and id(node) not in docstrings:
            yield node.lineno, node.value


def user_facing_sources() -> list[Path]:
    """Where the reasons, conditions and status messages a user reads are written."""
    decider_core = REPO / "services" / "decider" / "gpuscale_decider" / "core"
    return [*sorted(decider_core.glob("*.py")), REPO / "shared" / "gpuscale" / "policy.py"]


@pytest.mark.parametrize("source", user_facing_sources(), ids=_relative)
def test_reasons_and_status_messages_speak_the_users_language(source: Path) -> None:
    found = [
        f"line {line}: {text!r}"
        for line, text in _messages(source)
        if internal_language(text) or RELEASE_HISTORY.search(text)
    ]
    assert found == []


def test_the_crd_s_descriptions_speak_the_users_language() -> None:
    """What `kubectl explain gpuscaler` prints."""
    text = (REPO / "deploy" / "cluster" / "crd-gpuscaler.yaml").read_text()
    assert internal_language(text) == []
    assert RELEASE_HISTORY.findall(text) == []


# --- GPUSCALER.md: the tables, then a complete vLLM example, then the prose -----------------


def _gpuscaler_doc() -> str:
    return (REPO / "docs" / "GPUSCALER.md").read_text()


def _vllm_example() -> list[dict[str, Any]]:
    block = re.findall(r"```yaml\n(.*?)```", _gpuscaler_doc(), re.S)[0]
    return [d for d in yaml.safe_load_all(block) if d]


def test_the_gpuscaler_doc_opens_with_its_field_tables_then_the_vllm_example() -> None:
    text = _gpuscaler_doc()
    headings = re.findall(r"^## (.+)$", text, re.M)
    assert headings[:3] == ["spec", "status", "Example: vLLM scaled on its queue"], headings[:4]
    assert text.index("<!-- spec-fields:begin") < text.index("```yaml")
    before_tables = text[: text.index("## spec")]
    assert len(before_tables.splitlines()) <= 15, "a short introduction, then the tables"


def test_the_vllm_example_is_a_deployment_with_the_collector_s_annotation_and_its_gpuscaler() -> None:
    deployment, scaler = _vllm_example()
    assert (deployment["kind"], scaler["kind"]) == ("Deployment", "GPUScaler")
    annotations = deployment["spec"]["template"]["metadata"]["annotations"]
    port = int(annotations[PORT_ANNOTATION])
    container = deployment["spec"]["template"]["spec"]["containers"][0]
    assert "vllm" in container["image"]
    assert port in [p["containerPort"] for p in container["ports"]]
    target = scaler["spec"]["scaleTargetRef"]
    assert (target["kind"], target["name"]) == ("Deployment", deployment["metadata"]["name"])
    assert scaler["metadata"]["namespace"] == deployment["metadata"]["namespace"]
    assert [m["name"] for m in scaler["spec"]["metrics"]] == ["requests_waiting"]


async def test_the_vllm_example_is_accepted_by_the_api_server(kube_sim: KubeSim) -> None:
    for obj in _vllm_example():
        await kube_sim.create(copy.deepcopy(obj))
    stored = kube_sim.get("apps/v1", "Deployment", "qwen-vllm", "default")
    assert stored["spec"]["template"]["metadata"]["annotations"][PORT_ANNOTATION] == "8000"
