"""Certificates made by the openssl CLI for one test run: a CA, and leaves it signs."""

from __future__ import annotations

import subprocess
from pathlib import Path

OPENSSL_EXT = "subjectAltName=DNS:localhost,IP:127.0.0.1"


def openssl(*args: str, cwd: Path) -> None:
    subprocess.run(["openssl", *args], cwd=cwd, check=True, capture_output=True)


KEY = ("-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:prime256v1", "-nodes")


def make_ca(cwd: Path, subject: str = "/CN=kafkalens test CA") -> None:
    """ca.key and ca.crt in `cwd`, valid two days."""
    openssl(
        "req", "-x509", *KEY, "-keyout", "ca.key", "-out", "ca.crt", "-days", "2", "-subj", subject, cwd=cwd
    )  # fmt: skip


def issue(cwd: Path, name: str, subject: str, ext: str | None = None) -> None:
    openssl("req", *KEY, "-keyout", f"{name}.key", "-out", f"{name}.csr", "-subj", subject, cwd=cwd)
    extra = ["-extfile", "ext.cnf"] if ext else []
    if ext:
        (cwd / "ext.cnf").write_text(ext + "\n")
    openssl(
        "x509", "-req", "-in", f"{name}.csr", "-CA", "ca.crt", "-CAkey", "ca.key",
        "-CAcreateserial", "-out", f"{name}.crt", "-days", "2", *extra, cwd=cwd,
    )  # fmt: skip
