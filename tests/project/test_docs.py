"""The documentation site builds from the repository's Markdown without a warning, so
every link between its pages, to a heading of one, or to a file of the repository
leads somewhere (docs/conf.py); and a link that leads nowhere fails the build."""

from __future__ import annotations

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
