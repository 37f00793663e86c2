"""The local JVM's class-data sharing archive: written by one run, used by the next."""

from __future__ import annotations

import os
import time
from pathlib import Path

import pytest

from pipeline.session import CDS_ENV, cds_archive, cds_options


@pytest.fixture(autouse=True)
def archive_allowed(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv(CDS_ENV, raising=False)  # tests/conftest.py turns it off elsewhere


def test_first_run_writes_its_own_archive(tmp_path: Path) -> None:
    archive = cds_archive(tmp_path)
    assert archive.parent == tmp_path / "kafkalens" and archive.suffix == ".jsa"
    options = cds_options(archive)
    assert f"-XX:ArchiveClassesAtExit={archive}.{os.getpid()}.tmp" in options
    assert "-Xlog:cds=off" in options and archive.parent.is_dir()


def test_a_whole_archive_is_promoted_then_used(tmp_path: Path) -> None:
    archive = tmp_path / "a.jsa"
    written = tmp_path / "a.jsa.123.tmp"
    written.write_bytes(b"jsa")
    # Young: maybe still being written, so neither used nor replaced.
    assert "ArchiveClassesAtExit" in cds_options(archive, now=time.time())
    assert not archive.exists()
    later = time.time() + 3600
    assert cds_options(archive, now=later).startswith(f"-XX:SharedArchiveFile={archive} ")
    assert archive.read_bytes() == b"jsa" and not written.exists()
    # Another run's archive written meanwhile is dropped, the first one kept.
    (tmp_path / "a.jsa.456.tmp").write_bytes(b"other")
    assert "SharedArchiveFile" in cds_options(archive, now=later)
    assert archive.read_bytes() == b"jsa" and not (tmp_path / "a.jsa.456.tmp").exists()


def test_no_archive_where_the_cache_cannot_be_written(tmp_path: Path) -> None:
    blocked = tmp_path / "file"
    blocked.write_text("")
    assert cds_options(blocked / "kafkalens" / "a.jsa") == ""


def test_no_archive_when_turned_off(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv(CDS_ENV, "0")
    (tmp_path / "a.jsa").write_bytes(b"jsa")
    assert cds_options(tmp_path / "a.jsa") == ""
