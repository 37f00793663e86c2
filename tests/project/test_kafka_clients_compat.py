"""The compatibility table (docs/compatibility.md) is made from the rows the tests
record (support.compat): rendered, read back, and judged stale against a run's rows, the
way the session's end judges it; and the page's own table is one it could have written."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest
from support import compat
from support.compat import FAIL, PASS, Row

KAFKA_NEW, KAFKA_OLD = "Apache Kafka 4.10.0", "Apache Kafka 4.9.1"


def _rows() -> list[Row]:
    return [
        Row(KAFKA_OLD, "Java (kafka-clients)", "4.9.1", "sidecar", "producer", True),
        Row(KAFKA_NEW, "Java (kafka-clients)", "4.10.0", "sidecar", "producer", True),
        Row(KAFKA_NEW, "Java (kafka-clients)", "4.10.0", "gateway", "producer", True),
        Row(KAFKA_NEW, "franz-go", "1.18.0", "sidecar", "KIP-848 consumer", True),
        # the same cell twice: it passes only if both did
        Row(KAFKA_NEW, "franz-go", "1.18.0", "gateway", "KIP-848 consumer", True),
        Row(KAFKA_NEW, "franz-go", "1.18.0", "gateway", "KIP-848 consumer", False),
        Row("tansu 0.6.0", "aiokafka", "0.14.0", "sidecar", "produce, consume", True),
    ]


def test_the_table_has_a_column_per_broker_and_mode_newest_kafka_first() -> None:
    table = compat.render(compat.cells(_rows()))
    lines = table.splitlines()
    assert lines[0] == (
        "| Client | Version | What was checked | Apache Kafka 4.10.0 sidecar | "
        "Apache Kafka 4.10.0 gateway | Apache Kafka 4.9.1 sidecar | tansu 0.6.0 sidecar |"
    )
    assert lines[2:] == [
        f"| aiokafka | 0.14.0 | produce, consume |  |  |  | {PASS} |",
        f"| franz-go | 1.18.0 | KIP-848 consumer | {PASS} | {FAIL} |  |  |",
        f"| Java (kafka-clients) | 4.10.0 | producer | {PASS} | {PASS} |  |  |",
        f"| Java (kafka-clients) | 4.9.1 | producer |  |  | {PASS} |  |",
    ]


def test_a_rendered_table_reads_back_as_its_cells() -> None:
    found = compat.cells(_rows())
    assert compat.parse(compat.render(found)) == found
    assert compat.parse(compat.render({})) == {}


def test_a_table_is_stale_when_the_run_finds_otherwise() -> None:
    found = compat.cells(_rows())
    assert compat.stale(found, found, complete=True) == []
    new_row = Row(KAFKA_NEW, "sarama", "1.45.0", "sidecar", "produce", True)
    broke = Row(KAFKA_OLD, "Java (kafka-clients)", "4.9.1", "sidecar", "producer", False)
    run = compat.cells([new_row, broke])
    problems = compat.stale(found, run, complete=False)
    assert problems == [
        f"the table says {PASS}, the run found {FAIL}: Java (kafka-clients) 4.9.1, producer: "
        f"{KAFKA_OLD} sidecar",
        f"not in the table: sarama 1.45.0, produce: {KAFKA_NEW} sidecar {PASS}",
    ]
    # Part of the suite cannot tell a cell no longer found; the whole suite can.
    assert len(compat.stale(found, run, complete=True)) == len(problems) + len(found) - 1


def test_rows_must_fit_a_table_cell() -> None:
    with pytest.raises(ValueError, match="cannot be a table cell"):
        compat.record(KAFKA_NEW, "a | b", "1", "sidecar", "x", True)
    with pytest.raises(ValueError, match="mode must be one of"):
        compat.record(KAFKA_NEW, "a", "1", "proxy", "x", True)


def test_checking_records_a_pass_a_failure_and_no_skip() -> None:
    before = len(compat.ROWS)
    try:
        with compat.checking(KAFKA_NEW, "c", "1", "sidecar", "passes"):
            pass
        with pytest.raises(AssertionError), compat.checking(KAFKA_NEW, "c", "1", "sidecar", "fails"):
            raise AssertionError("no")
        with pytest.raises(pytest.skip.Exception), compat.checking(KAFKA_NEW, "c", "1", "sidecar", "skips"):
            pytest.skip("not here")
        assert [(r.feature, r.passed) for r in compat.ROWS[before:]] == [("passes", True), ("fails", False)]
    finally:
        del compat.ROWS[before:]  # not rows of this run's matrix


def test_a_workers_rows_reach_the_controller_as_they_were_recorded() -> None:
    """Under pytest-xdist each worker hands its rows over as plain data (`dump`, through
    the worker's output, which must be JSON-like) and the controller adds them (`load`):
    the table is then made from every worker's rows, each as recorded."""
    before = len(compat.ROWS)
    try:
        compat.ROWS.extend(_rows())
        handed = json.loads(json.dumps(compat.dump()[before:]))  # what crosses processes
        del compat.ROWS[before:]
        compat.load(handed)
        assert compat.ROWS[before:] == _rows()
    finally:
        del compat.ROWS[before:]


def test_the_command_rewrites_the_page_from_a_runs_rows(tmp_path: Path) -> None:
    page = tmp_path / "compatibility.md"
    page.write_text(f"# x\n\n{compat.BEGIN}\nold\n{compat.END}\n\nafter\n")
    rows = tmp_path / "compat.json"
    saved = list(compat.ROWS)
    compat.ROWS[:] = _rows()
    try:
        compat.write(rows, complete=True)
    finally:
        compat.ROWS[:] = saved
    script = Path(compat.__file__)
    done = subprocess.run(
        [sys.executable, str(script), "--rows", str(rows), "--page", str(page)],
        capture_output=True, text=True, timeout=60,
    )  # fmt: skip
    assert done.returncode == 0, done.stderr
    text = page.read_text()
    assert text.startswith("# x\n") and text.endswith("\nafter\n") and "old" not in text
    assert compat.parse(compat.page_table(text)) == compat.cells(_rows())
    # From part of the suite, the run's cells replace the table's, the others stay.
    partial = [Row(KAFKA_NEW, "franz-go", "1.18.0", "gateway", "KIP-848 consumer", True)]
    compat.update_page(partial, complete=False, page=page)
    cells = compat.parse(compat.page_table(page.read_text()))
    assert cells == {**compat.cells(_rows()), **compat.cells(partial)}


def test_the_pages_table_is_one_the_rows_make() -> None:
    """docs/compatibility.md's table reads back whole and renders to itself: nothing was edited
    into it by hand that rows could not have made."""
    text = compat.PAGE.read_text()
    table = compat.page_table(text)
    cells = compat.parse(table)
    assert cells, "docs/compatibility.md's table is empty: run the suite, then the command"
    assert table.strip() == compat.render(cells)
