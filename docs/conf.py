"""The documentation site: Sphinx with MyST (Markdown), built from the repository's root.

    .venv/bin/python -m sphinx -W --keep-going -b html -c docs . site

(`make docs`; tests/project/test_docs.py builds it so in the test suite, and fails on
any warning). The site's pages are the Markdown files where they live: the README,
docs/ (the guides and the generated reference), ARCHITECTURE.md, and the READMEs and
measurement documents of codec/, pipeline/, deploy/ and bench/, so a link between them
is the same relative link on the site as in the repository, and none is copied. Every
link to a page, a heading of one (GitHub's anchors, `#the-request-log`) or a file of
the repository is checked as the site is built: a link that leads nowhere is a warning,
and `-W` makes any warning fail the build.

Sphinx rather than MkDocs: MkDocs's pages must all live under one folder (docs_dir may
not be the folder of its configuration or above it), so the READMEs beside the code
would have to be copied in or left off the site; Sphinx reads the repository's root
with `include_patterns`, and MyST reports a missing page, heading or file as a warning.
"""

project = "kafkalens"
author = "the kafkalens authors"
extensions = ["myst_parser"]
source_suffix = {".md": "markdown"}
root_doc = "docs/index"
# The Markdown files the site is made of, where they are in the repository.
include_patterns = [
    "README.md",
    "ARCHITECTURE.md",
    "docs/**.md",
    "codec/README.md",
    "pipeline/README.md",
    "deploy/README.md",
    "bench/*.md",
    # the last full runs the benchmark documents link (a run elsewhere in bench/ writes
    # files of its own, which are not pages)
    "bench/proxy/versus/RESULTS.md",
    "bench/proxy/results/results.md",
]
# Never walked: what a checkout holds beside the sources (a venv, the peers' builds).
exclude_patterns = [".venv", ".git", "site", "tests", "**/node_modules", "**/work"]
# Headings up to h4 are link targets, with GitHub's anchors, so one link works in both.
myst_heading_anchors = 4
myst_enable_extensions = ["deflist"]
html_theme = "furo"
html_title = "kafkalens"
html_copy_source = False
html_show_sourcelink = False
# site/index.html: leads to the home page, docs/index.html
html_extra_path = ["_root"]  # relative to this folder
html_show_copyright = False
