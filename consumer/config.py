"""What a consumer is, fixed before it starts."""

from __future__ import annotations

from dataclasses import dataclass

from scrapefleet.common.actions.registry import load_user_actions, longest_time_limit_s
from scrapefleet.common.settings import Settings
from scrapefleet.consumer.browser.actions import artifacts
from scrapefleet.consumer.runner import CaptureFailure, DriverFactory


@dataclass(frozen=True)
class ConsumerConfig:
    """What a consumer is: fixed before it starts, never changed while it runs."""

    settings: Settings
    host: str
    driver_factory: DriverFactory | None  # tests' fakes; None -> the host's own browser stack
    capture_failure: CaptureFailure
    drain_timeout_s: float  # a warm stop waits this long for in-flight jobs, then turns cold

    @classmethod
    def build(
        cls,
        settings: Settings,
        host: str,
        *,
        driver_factory: DriverFactory | None = None,
        capture_failure: CaptureFailure | None = None,
        drain_timeout_s: float | None = None,
    ) -> ConsumerConfig:
        if drain_timeout_s is None:
            # No attempt runs longer than its action's timeout_s, else job_timeout_s: a drain
            # that long waits for any job. The user actions are loaded for their limits (a
            # module that does not import stops the consumer here, naming it).
            load_user_actions(settings.actions)
            drain_timeout_s = longest_time_limit_s(settings.job_timeout_s)
        return cls(
            settings=settings,
            host=host,
            driver_factory=driver_factory,
            capture_failure=capture_failure
            or artifacts.capture_into(settings.artifacts_dir, settings.artifact_html_max_bytes),
            drain_timeout_s=drain_timeout_s,
        )

    @property
    def owns_browser_stack(self) -> bool:
        """settings.browser and no driver factory from the caller."""
        return self.driver_factory is None and self.settings.browser
