"""Settings of the fleet as a whole: where its files live, which actions it loads, and each host's
budgets (how many jobs at once, when its browser stack is restarted and the host rebooted).
"""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

from pydantic import BaseModel, Field
from pydantic_settings import NoDecode


class FleetSettings(BaseModel):
    # Where everything lives.
    state_dir: Path = Field(
        default=Path("/var/lib/scrapefleet"),
        description=(
            "status files; a producer and the consumers on its own machine (hosts "
            "without an address) must share it: the producer reads their status "
            "files there, and says so (`no status file at ...: is its consumer "
            "running, with this producer's state_dir (...)?`) when it finds none"
        ),
    )
    artifacts_dir: Path = Field(
        default=Path("/var/lib/scrapefleet/artifacts"),
        description="failure screenshots, HTML and tracebacks, by job id and attempt",
    )
    # NoDecode: a list setting's environment value reaches common.settings' _comma_separated as it
    # is, so that "a,b" works as well as JSON.
    actions: Annotated[list[str], NoDecode] = Field(
        default_factory=list,
        description="user actions: 'module' (imported: its @register actions) or"
        " 'module:function' dotted paths (env: comma-separated, or a JSON list); installed"
        " packages' 'scrapefleet.actions' entry points are loaded too",
    )

    # Each host's budgets.
    capacity: int = Field(
        default=6,
        ge=1,
        le=64,
        description="jobs a host runs at once (hosts added without --capacity)",
    )
    # The design card's policy: the whole stack every 20 browser jobs, the host every 80. The
    # cheaper policy (browsers retired every 20 inside the running Grid, the stack every 80) is
    # restart_every = 80: browsers are what leaks, and a JVM and every browser started again
    # cost CPU (docs/browser-benchmark.md has both, with their memory).
    restart_every: int = Field(
        default=20,
        ge=0,
        description="the whole browser stack (Grid, Xvfb and every browser) is restarted after"
        " this many browser jobs, as the design card says; 0 = never. 80 (with"
        " browser_retire_every = 20) is the cheaper policy: browsers replaced every 20 of their"
        " own jobs in the running Grid, the stack every 80",
    )
    browser_retire_every: int = Field(
        default=20,
        ge=0,
        description="each browser session is quit and replaced after this many of its own"
        " jobs, in the running Grid (browsers are what leaks); 0 = only with the stack",
    )
    overlap_restarts: bool = Field(
        default=True,
        description="start the next browser stack beside the running one before the restart"
        " budget and switch to it at the budget (false: drain, stop, then start)",
    )
    # host rebooted after this many claims since boot
    reboot_every: int = Field(default=80, ge=0, description="0 = never")
