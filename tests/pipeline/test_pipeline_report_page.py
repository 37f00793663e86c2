"""report.html as a person reads it, in a real browser (Debian's headless chromium,
tests/support/chromium.py): it loads without a console error or exception, every chart
drew its data (each data mark an SVG element with a size), axes read as numbers are
written, nothing makes the page scroll sideways, every section has a human title and
an explanation, empty sections say what their emptiness means, the summary names
what the written tables say is wrong, and no internal name or key shows.

Set KAFKALENS_SCREENS=DIR to keep the screenshots the tests take.
"""

from __future__ import annotations

import os
import re
import shutil
from pathlib import Path
from typing import Any

import pytest
from pyspark.sql import SparkSession
from support.chromium import Browser
from support.synth import Synth, to_line, write_rotated

from pipeline import sections
from pipeline.report import run_report
from pipeline.summary import ERROR_RATE_ATTENTION, ReportResult, summary_lines
from pipeline.tables import TABLE_ORDER


@pytest.fixture(scope="module")
def fleet(spark: SparkSession, tmp_path_factory: pytest.TempPathFactory
          ) -> tuple[ReportResult, Path]:
    """A report over logs with every kind of line (followers' fetches, telemetry, bad
    lines): every table has rows and every chart data."""
    root = tmp_path_factory.mktemp("page")
    synth = Synth(seed=23, bad_every=997, other_every=503, follower_every=97,
                  telemetry_every=61)
    write_rotated(root / "logs", map(to_line, synth.events(8000)), 2000, gz=True)
    out = root / "out"
    return run_report(spark, [str(root / "logs")], str(out)), out


@pytest.fixture(scope="module")
def empty(spark: SparkSession, tmp_path_factory: pytest.TempPathFactory) -> Path:
    root = tmp_path_factory.mktemp("empty")
    (root / "logs").mkdir()
    (root / "logs" / "requests.log").write_text("")
    run_report(spark, [str(root / "logs")], str(root / "out"))
    return root / "out"


@pytest.fixture(scope="module")
def browser(tmp_path_factory: pytest.TempPathFactory) -> Any:
    with Browser(tmp_path_factory.mktemp("chromium") / "profile") as b:
        yield b


def keep_screenshot(page: Any, tmp: Path, name: str) -> None:
    shot = page.screenshot(tmp / f"{name}.png")
    if keep := os.environ.get("KAFKALENS_SCREENS"):
        Path(keep).mkdir(parents=True, exist_ok=True)
        shutil.copy(shot, Path(keep) / shot.name)


# Per chart: its id, how many data marks have a size, the texts of its axes' ticks.
CHARTS_JS = """
Array.from(document.querySelectorAll("figure.chart")).map(function(f){
  var marks=Array.from(f.querySelectorAll("svg [id^='data-']")).filter(function(m){
    var b=m.getBBox(); return b.width>0||b.height>0});
  return {id:f.id, marks:marks.length,
          x:Array.from(f.querySelectorAll("svg g[id^='xtick'] text")).map(function(t){
            return t.textContent}),
          y:Array.from(f.querySelectorAll("svg g[id^='ytick'] text")).map(function(t){
            return t.textContent})};
})
"""


BAR_CHARTS = ("chart-percentiles", "chart-topics", "chart-software")
NUMBER = r"[\d,]+(\.\d+)?[kMG]?|[\d.]+ (B|KB|MB|GB|TB)"


def test_the_page_loads_in_a_browser_and_every_chart_has_data(
        fleet: tuple, browser: Browser, tmp_path: Path) -> None:
    result, out = fleet
    page = browser.open((out / "report.html").as_uri())
    charts = page.evaluate(CHARTS_JS)
    assert [c["id"] for c in charts] == [c.anchor for c in sections.CHARTS.values()]
    for chart in charts:
        assert chart["marks"] > 0, chart["id"]
        # Numbers as people write them (no 10⁻¹, 6×10⁰, 1e+03) on the value axis: y over
        # time, x of the bars.
        values = chart["x"] if chart["id"] in BAR_CHARTS else chart["y"]
        assert values and all(re.fullmatch(NUMBER, t) for t in values), (chart["id"], values)
    # Laptop width: the page never scrolls sideways; wide tables scroll in their box.
    assert page.evaluate("document.documentElement.scrollWidth <= window.innerWidth")
    assert page.evaluate("Array.from(document.querySelectorAll('.scroll')).some("
                         "function(d){return d.scrollWidth > d.clientWidth})")
    assert page.console_errors() == []
    keep_screenshot(page, tmp_path, "report-synthetic")


def test_every_section_is_titled_explained_and_in_the_contents(
        fleet: tuple, browser: Browser) -> None:
    _, out = fleet
    page = browser.open((out / "report.html").as_uri())
    headings = page.evaluate("Array.from(document.querySelectorAll('h2')).map("
                             "function(h){return h.textContent})")
    assert not set(headings) & set(TABLE_ORDER)  # no internal names as titles
    shown = [sections.SECTIONS[name] for name in sections.PAGE_ORDER]
    assert [s.title for s in shown] == [h for h in headings if h not in (
        "Summary", "Contents", "Charts")]
    for s in shown:
        what = page.evaluate(f"document.querySelector('#{s.anchor} .what').textContent")
        assert what == s.what
    links = page.evaluate("Array.from(document.querySelectorAll('nav a')).map("
                          "function(a){return a.getAttribute('href')})")
    targets = page.evaluate("Array.from(document.querySelectorAll('[id]')).map("
                            "function(e){return '#'+e.id})")
    assert set(links) <= set(targets) and len(links) == 2 + len(sections.CHARTS) + len(shown)
    # No internal client keys ("client id|host|software|version") in any cell.
    cells = page.evaluate("Array.from(document.querySelectorAll('td')).map("
                          "function(td){return td.textContent})")
    assert cells and not [c for c in cells if re.search(r"[^|]*\|[^|]*\|", c)]
    # A click on a header sorts the rows by it (numbers by value).
    requests = page.evaluate("""(function(){
      var t=document.querySelector('#clients table');
      var i=Array.from(t.tHead.rows[0].cells).findIndex(function(c){
        return c.textContent==='Requests'});
      t.tHead.rows[0].cells[i].click();
      return Array.from(t.tBodies[0].rows).map(function(r){
        return parseFloat(r.cells[i].getAttribute('data-v'))});
    })()""")
    assert requests == sorted(requests) and len(set(requests)) > 1
    assert page.console_errors() == []


def test_the_summary_names_what_the_written_tables_say_is_wrong(
        spark: SparkSession, fleet: tuple, browser: Browser) -> None:
    result, out = fleet
    by_api = {r["api"]: r.asDict() for r in spark.read.parquet(str(out / "latency_by_api"))
              .collect()}
    failing = {api for api, r in by_api.items() if r["error_rate"] >= ERROR_RATE_ATTENTION}
    readiness = spark.read.parquet(str(out / "kafka4_readiness")).collect()
    assert failing and readiness  # the input has both
    text = "\n".join(summary_lines(result))
    named = set(re.findall(r"^- (\w+): [\d.]+% of its [\d,]+ requests failed", text, re.M))
    assert named == set(sorted(failing, key=lambda a: -by_api[a]["error_rate"])[:3])
    for api in named:
        rate = by_api[api]["error_rate"]
        assert f"- {api}: {rate:.1%} of its {by_api[api]['requests']:,} requests failed" in text
    clients = {r["client_key"] for r in readiness}
    assert f"- {len(clients)} clients use api versions that would be refused by Kafka 4.0" in text
    assert f"{result.counts.bad:,} lines could not be read" in text
    # The page opens with the same sentences.
    page = browser.open((out / "report.html").as_uri())
    attention = page.evaluate("Array.from(document.querySelectorAll('.attention li')).map("
                              "function(li){return li.firstChild.textContent.trim()})")
    assert attention == [line[2:] for line in text.splitlines() if line.startswith("- ")]


def test_every_written_column_is_explained(spark: SparkSession, fleet: tuple) -> None:
    _, out = fleet
    for name in TABLE_ORDER:
        written = spark.read.parquet(str(out / name)).columns
        section = sections.SECTIONS[name]
        assert set(section.columns) == set(written), name
        for column, col in section.columns.items():
            assert col.label and col.meaning, (name, column)


def test_an_empty_report_says_what_each_empty_section_means(
        empty: Path, browser: Browser, tmp_path: Path) -> None:
    page = browser.open((empty / "report.html").as_uri())
    for name in sections.PAGE_ORDER:
        s = sections.SECTIONS[name]
        said = page.evaluate(f"(function(){{var e=document.getElementById('{s.anchor}');"
                             "return [e.className, e.querySelector('p').textContent]})()")
        if name == "input_files":  # the empty file is listed, with its 0 lines
            assert said[0] == "table"
            continue
        assert said == ["empty", s.empty], name
    readiness = sections.SECTIONS["kafka4_readiness"].empty
    assert readiness.startswith("Every client is ready for Kafka 4.0")
    notes = page.evaluate("Array.from(document.querySelectorAll('#charts div.empty p')).map("
                          "function(p){return p.textContent})")
    assert notes == [c.empty for c in sections.CHARTS.values()]
    assert page.evaluate("document.querySelector('.clear').textContent").startswith(
        "Nothing needs attention")
    assert page.console_errors() == []
    keep_screenshot(page, tmp_path, "report-empty")
