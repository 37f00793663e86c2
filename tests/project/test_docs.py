"""The documentation site builds from the repository's Markdown without a warning, so
every link between its pages, to a heading of one, or to a file of the repository
leads somewhere (docs/conf.py); and a link that leads nowhere fails the build."""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

from support.paths import REPO


def build(source: Path, out: Path) -> subprocess.CompletedProcess[str]:
    """`make docs`'s command: the site of `source` with docs/conf.py, warnings as errors."""
    return subprocess.run(
        [sys.executable, "-m", "sphinx", "-W", "--keep-going", "-q", "-b", "html",
         "-c", str(REPO / "docs"), "-d", str(out / ".doctrees"), str(source), str(out)],
        capture_output=True, text=True, timeout=300,
    )  # fmt: skip


def test_the_site_builds_without_a_warning(tmp_path: Path) -> None:
    built = build(REPO, tmp_path / "site")
    assert built.returncode == 0, built.stderr
    pages = {p.relative_to(tmp_path / "site").as_posix() for p in (tmp_path / "site").rglob("*.html")}
    for page in ("docs/index.html", "README.html", "ARCHITECTURE.html", "pipeline/README.html",
                 "deploy/README.html", "codec/README.html", "bench/README.html"):  # fmt: skip
        assert page in pages, sorted(pages)
    # the site's root leads to its home page
    assert 'url=docs/index.html' in (tmp_path / "site" / "index.html").read_text()


SOUND = """\
# Home

## A heading

[a heading](#a-heading), [another page's heading](other.md#its-heading),
[a file](data.txt).

```{toctree}
other
```
"""
OTHER = "# Other\n\n## Its heading\n\nBack [home](index.md#a-heading).\n"


def small_site(tmp_path: Path, index: str) -> Path:
    source = tmp_path / "source"
    (source / "docs").mkdir(parents=True)
    (source / "docs" / "index.md").write_text(index)
    (source / "docs" / "other.md").write_text(OTHER)
    (source / "docs" / "data.txt").write_text("x\n")
    return source


def test_a_small_site_with_sound_links_builds(tmp_path: Path) -> None:
    """The control for the test below: the same site, every link sound."""
    built = build(small_site(tmp_path, SOUND), tmp_path / "out")
    assert built.returncode == 0, built.stderr


BROKEN = {
    "[no such heading](#no-such-heading)": "'no-such-heading'",
    "[no such heading there](other.md#nowhere)": "'nowhere'",
    "[no such page](missing.md)": "'missing.md'",
    "[no such file](missing.txt)": "'missing.txt'",
}


def test_a_link_that_leads_nowhere_fails_the_build(tmp_path: Path) -> None:
    """Each kind of broken link, in one build (a build takes about a second): each is
    named, with the page it is on."""
    index = SOUND.replace("[a file](data.txt)", ", ".join(BROKEN))
    built = build(small_site(tmp_path, index), tmp_path / "out")
    assert built.returncode != 0
    problems = [line for line in built.stderr.splitlines() if "WARNING" in line]
    for link, said in BROKEN.items():
        assert any(said in line and "index.md" in line for line in problems), (link, built.stderr)
    assert len(problems) == len(BROKEN), built.stderr


def test_the_generated_reference_pages_are_current() -> None:
    """docs/reference/ is what `python -m proxy.reference` writes from the config keys'
    and the metrics' declarations (`make generate`): a key or a metric added, changed or
    removed is documented by regenerating, never by hand."""
    from proxy.reference import PAGES

    for path, make in PAGES.items():
        assert path.read_text(encoding="utf-8") == make(), (
            f"{path.relative_to(REPO)} is stale: run .venv/bin/python -m proxy.reference"
        )


def test_every_key_and_every_metric_is_in_the_reference() -> None:
    """The pages list every key the reader accepts and every sample /metrics can show
    (the dashboards' and alerts' checks take their names from the same registry)."""
    from proxy.config.language import declared
    from proxy.features import SECTION_SCHEMAS, metric_names
    from proxy.reference import configuration_page, metrics_page

    keys = configuration_page()
    for path, cls in SECTION_SCHEMAS.items():
        assert (f"## `{path}`" if path else "## Top level") in keys
        for name in declared(cls):
            assert f"| `{name}` |" in keys, f"{path}.{name}"
    metrics = metrics_page()
    for name in metric_names():
        family = name.removesuffix("_bucket").removesuffix("_count").removesuffix("_sum")
        assert f"`{name}`" in metrics or f"`{family}` (`_bucket`" in metrics, name


# What a user document never says: the history of its writing (which issue, session or
# branch a thing came from, what it was before): git's history holds that.
HISTORY = re.compile(
    r"(?<![\w/&`#])#\d{1,4}\b|\bissues? #?\d+\b|\bsession \d+\b|\bthis branch\b"
    r"|\bbefore this change\b|\b(first|second|third|fourth|fifth|sixth) pass\b",
    re.IGNORECASE,
)
USER_DOCUMENTS = ["README.md", "docs/*.md", "pipeline/README.md", "deploy/README.md",
                  "codec/README.md", "bench/README.md", "bench/RELIABILITY.md",
                  "bench/PROFILE.md", "bench/PIPELINE.md"]  # fmt: skip


def test_the_user_documents_tell_no_history() -> None:
    found = [
        f"{path.relative_to(REPO)}:{number}: {line.strip()}"
        for pattern in USER_DOCUMENTS
        for path in sorted(REPO.glob(pattern))
        for number, line in enumerate(path.read_text(encoding="utf-8").splitlines(), 1)
        if HISTORY.search(line)
    ]
    assert found == []


# A comment or docstring of the product's code gives the reason for a choice and cites
# where its figure lives: bench/DOC.md, "Heading", a bench module, or a bench file.
CITED_HEADING = re.compile(r'bench/((?:[\w-]+/)*[\w-]+\.md), "([^"]+)"')
CITED_MODULE = re.compile(r"\bbench\.((?:proxy|codec|pipeline)\.\w+)")
CITED_FILE = re.compile(r"\bbench/((?:[\w-]+/)*[\w-]+\.(?:md|py))\b")
PRODUCT = ("proxy", "codec", "pipeline")


def _product_text(path: Path) -> str:
    """The file with its comments' and docstrings' wrapped lines joined."""
    return re.sub(r"\s*\n\s*(?:#|\*|//)?\s*", " ", path.read_text(encoding="utf-8"))


def test_what_the_code_cites_in_bench_is_there() -> None:
    sources = [p for room in PRODUCT for p in sorted((REPO / room).rglob("*"))
               if p.suffix in (".py", ".c") and "generated" not in p.parts]  # fmt: skip
    cited, missing = 0, []
    for path in sources:
        text = _product_text(path)
        for doc, heading in CITED_HEADING.findall(text):
            cited += 1
            headings = {line.lstrip("#").strip() for line in
                        (REPO / "bench" / doc).read_text(encoding="utf-8").splitlines()
                        if line.startswith("#")}  # fmt: skip
            if heading not in headings:
                missing.append(f"{path.relative_to(REPO)}: bench/{doc}, {heading!r}")
        for module in CITED_MODULE.findall(text):
            cited += 1
            if not (REPO / "bench" / (module.replace(".", "/") + ".py")).exists():
                missing.append(f"{path.relative_to(REPO)}: bench.{module}")
        for file in CITED_FILE.findall(text):
            cited += 1
            if not (REPO / "bench" / file).exists():
                missing.append(f"{path.relative_to(REPO)}: bench/{file}")
    assert cited > 20
    assert missing == []


def test_every_field_the_pipeline_reads_is_documented() -> None:
    """The request log's fields that pipeline/schema.py reads (the pipeline's contract
    with the proxy) are each named on a page of the guide."""
    from support.readme import USER_DOCS

    from pipeline.schema import LINE_SCHEMA

    undocumented = [f.name for f in LINE_SCHEMA.fields
                    if not f.name.startswith("_") and f"`{f.name}`" not in USER_DOCS]  # fmt: skip
    assert undocumented == []


# A benchmark figure in a comment or docstring of the product's code: a measurement
# ("measured" and a number in one sentence), a time in µs or ns, a count of instructions,
# a percentage more or less. Such a figure lives in bench/, which the comment cites.
FIGURE = re.compile(
    r"\bmeasured\b[^.;]*\d|\d[\d,.]*\s?(?:µs|us|ns)\b|\d[\d,]*\s+instructions\b"
    r"|\d\s?%\s+(?:more|less|faster|slower)\b",
    re.IGNORECASE,
)
# (file, what the line says): figures left while another branch rewrites the file; each
# goes with the line that cites bench/ instead.
FIGURES_LEFT = {
    # cost-core moves this comment; bench/PROFILE.md, "Kept, and what it saved", has it
    ("proxy/forward/connection.py", "~35 us"),
}


def _comment_lines(path: Path) -> list[tuple[int, str]]:
    """The lines of comments and docstrings (and C comments) of a source file."""
    found, in_doc = [], False
    for number, line in enumerate(path.read_text(encoding="utf-8").splitlines(), 1):
        text = line.strip()
        quotes = text.count('"""')
        code_comment = " # " in line or text.startswith(("#", "*", "/*", "//"))
        if in_doc or quotes or code_comment:
            found.append((number, text))
        if quotes % 2:
            in_doc = not in_doc
    return found


def test_the_code_carries_no_benchmark_figures() -> None:
    sources = [p for room in PRODUCT for p in sorted((REPO / room).rglob("*"))
               if p.suffix in (".py", ".c") and "generated" not in p.parts]  # fmt: skip
    found = [
        f"{path.relative_to(REPO)}:{number}: {text}"
        for path in sources
        for number, text in _comment_lines(path)
        if FIGURE.search(text)
        and not any(path.relative_to(REPO).as_posix() == file and said in text
                    for file, said in FIGURES_LEFT)  # fmt: skip
    ]
    assert found == []
