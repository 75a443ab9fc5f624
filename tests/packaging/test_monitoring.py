"""The Prometheus alerting rules and the Grafana dashboard shipped in docs/monitoring: the rules
pass `promtool check rules` and their own `promtool test rules` cases (each alert fires on the
series that should fire it, and not before its time), and every metric either file names is one
that scrapefleet exports."""

from __future__ import annotations

import json
import re
import shutil
import subprocess
from pathlib import Path

import pytest

from tests.waiting import scaled

pytestmark = [pytest.mark.packaging, pytest.mark.timeout(120)]

ROOT = Path(__file__).resolve().parents[2]
MONITORING = ROOT / "docs" / "monitoring"
# Where the instruments are declared: their names are string literals there.
SOURCES = ("common/runtime/metrics.py", "producer/background/fleet_metrics.py")
_NAME = re.compile(r"\bscrapefleet_[a-z_]+")
_SERIES_SUFFIXES = ("_bucket", "_sum", "_count")


def _promtool() -> str:
    found = shutil.which("promtool")
    if found is None:
        pytest.skip("promtool not installed: run .ci/install-fleet.sh (Debian's prometheus)")
    return found


def _exported() -> set[str]:
    return {name for path in SOURCES for name in _NAME.findall((ROOT / path).read_text())}


def _base(series: str) -> str:
    for suffix in _SERIES_SUFFIXES:
        if series.endswith(suffix):
            return series.removesuffix(suffix)
    return series


def test_the_rules_are_valid_and_their_cases_pass() -> None:
    promtool = _promtool()
    for argv in (["check", "rules", "alerts.yml"], ["test", "rules", "alerts.test.yml"]):
        done = subprocess.run(
            [promtool, *argv], cwd=MONITORING, capture_output=True, text=True, timeout=scaled(60)
        )
        assert done.returncode == 0, done.stdout + done.stderr


def test_the_rules_and_the_dashboard_name_only_exported_metrics() -> None:
    exported = _exported()
    dashboard = json.loads((MONITORING / "grafana-dashboard.json").read_text())
    expressions = [t["expr"] for panel in dashboard["panels"] for t in panel["targets"]]
    rules = (MONITORING / "alerts.yml").read_text()
    named = {_base(n) for text in [*expressions, rules] for n in _NAME.findall(text)}
    assert named, "no metric found: the pattern or the files changed"
    assert named <= exported, f"not exported by scrapefleet: {sorted(named - exported)}"
