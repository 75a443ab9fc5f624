"""Fixtures for tests over real SSH hosts (see tests/fleet/harness.py)."""

from __future__ import annotations

from collections.abc import Callable, Iterator

import pytest

from tests.fleet.harness import Fleet, FleetHost, missing_prerequisites

_RUNS: list[str] = []  # "mode run-id" of every fleet this session built


def pytest_terminal_summary(terminalreporter: pytest.TerminalReporter) -> None:
    """Every run says which mode the fleet ran in (netns or the 127.0.0.1 fallback)."""
    for run in _RUNS:
        terminalreporter.write_line(f"fleet harness: {run}")


@pytest.fixture(scope="session")
def fleet_factory() -> Iterator[Callable[..., Fleet]]:
    """Make Fleets that are all torn down at the end of the session, whatever happened."""
    if missing := missing_prerequisites():
        pytest.skip(f"missing {', '.join(missing)}: run .ci/install-fleet.sh")
    fleets: list[Fleet] = []

    def make(host_count: int = 0) -> Fleet:
        fleet = Fleet()
        fleets.append(fleet)
        _RUNS.append(f"mode={fleet.mode} run={fleet.run_id} hosts={host_count}")
        fleet.add_hosts(host_count)
        return fleet

    yield make
    for fleet in fleets:
        fleet.close()


@pytest.fixture(scope="module")
def fleet3(fleet_factory: Callable[..., Fleet]) -> Iterator[Fleet]:
    """Three hosts h1, h2, h3 shared by a module; use `fleet` for a healthy baseline."""
    fleet = fleet_factory(3)
    yield fleet
    fleet.close()


@pytest.fixture
def fleet(fleet3: Fleet) -> Fleet:
    """fleet3 restored to health: sshd up, original host keys, valid status documents."""
    fleet3.reset()
    return fleet3


@pytest.fixture
def hosts(fleet: Fleet) -> list[FleetHost]:
    return list(fleet.hosts.values())
