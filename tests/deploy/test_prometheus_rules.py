"""The alert rules as Prometheus itself reads them: `promtool check rules`, and the unit
tests kept beside the rules (deploy/prometheus/alerts_test.yml, run with `promtool test
rules`), which must give every alert a case that fires it and one that must not. The
copy of the rules the end-to-end tests load differs from the shipped file in `for:`
only."""

from __future__ import annotations

import re
import subprocess
from pathlib import Path

import yaml
from support.prometheus import (
    DASHBOARD_FILLS,
    FOR_IN_TESTS,
    RULE_TESTS,
    RULES,
    UNFILLABLE,
    alert_rules,
    dashboards,
    panel_targets,
    parse_duration,
    require,
    rules_for_tests,
    shipped_rules,
    without_for,
)


def promtool(*args: str) -> str:
    require("promtool")
    done = subprocess.run(["promtool", *args], capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stdout + done.stderr
    return done.stdout


def test_promtool_accepts_the_rules() -> None:
    out = promtool("check", "rules", str(RULES))
    assert "SUCCESS" in out


def test_the_rules_pass_their_unit_tests() -> None:
    out = promtool("test", "rules", str(RULE_TESTS))
    assert "SUCCESS" in out


def test_every_alert_has_a_case_that_fires_it_and_one_that_must_not() -> None:
    cases = yaml.safe_load(RULE_TESTS.read_text())
    assert cases["rule_files"] == [RULES.name]
    fires: set[str] = set()
    silent: set[str] = set()
    for group in cases["tests"]:
        for case in group.get("alert_rule_test", []):
            (fires if case["exp_alerts"] else silent).add(case["alertname"])
            for expected in case["exp_alerts"]:
                # the annotations are compared in full: a template that renders wrong fails
                assert expected["exp_annotations"]["summary"], case
    alerts = set(alert_rules(shipped_rules()))
    assert alerts - fires == set(), "alerts no case fires"
    assert alerts - silent == set(), "alerts no case holds silent"
    assert (fires | silent) <= alerts, "cases of alerts that do not exist"


def test_the_end_to_end_rules_differ_from_the_shipped_ones_in_for_only() -> None:
    shipped, tests = shipped_rules(), rules_for_tests()
    assert without_for(tests) == without_for(shipped)
    assert yaml.safe_load(yaml.safe_dump(tests)) == tests  # as written to Prometheus's file
    for name, rule in alert_rules(tests).items():
        original = parse_duration(str(alert_rules(shipped)[name]["for"]))
        assert rule["for"] == (FOR_IN_TESTS if original > 0 else alert_rules(shipped)[name]["for"]), name


def test_every_alert_is_fired_end_to_end_by_some_scenario() -> None:
    """Each alert of the shipped rules is waited for firing on a real Prometheus by
    one of the end-to-end modules (test_prometheus_alerts, test_prometheus_probes)."""
    sources = "".join(p.read_text() for p in sorted(Path(__file__).parent.glob("test_prometheus_*.py")))
    waited = set(re.findall(r'wait_firing\(\s*"(\w+)"', sources))
    waited |= set(re.findall(r'alerts\(\s*"(\w+)",\s*"firing"\)', sources))
    missing = set(alert_rules(shipped_rules())) - waited
    assert not missing, f"alerts no end-to-end scenario fires: {sorted(missing)}"


def test_every_dashboard_query_is_filled_by_a_scenario_or_says_why_not() -> None:
    queries = {(title, ref) for board in dashboards().values() for title, ref, _ in panel_targets(board)}
    declared = set().union(*DASHBOARD_FILLS.values())
    assert queries - declared - set(UNFILLABLE) == set(), "queries no scenario fills"
    assert declared <= queries and set(UNFILLABLE) <= queries, "declared queries that are not there"
    assert not declared & set(UNFILLABLE)
