"""Per-pytest-run state: the profile (loaded once) and the gate session (booted on first use)."""

from __future__ import annotations

from pathlib import Path
from typing import NoReturn

import pytest

from perfgate.errors import PerfgateError
from perfgate.profile import Profile, load_profile
from perfgate.session import RunSummary, Session, SessionOptions

DEFAULT_PROFILE = "profiles/sim-glm5.toml"


class PluginState:
    def __init__(self, config: pytest.Config) -> None:
        self.config = config
        self._profile: Profile | None = None
        self.session: Session | None = None
        self.teardown_notes: list[str] = []
        # Error message -> the test that showed it in full; later tests hit by the same error
        # (every test of a workload, every workload after a failed boot) get one line.
        self._shown: dict[str, str] = {}

    def fail_once(self, error: Exception, nodeid: str) -> NoReturn:
        """Fail the current test with ``error``: in full the first time, as one line referring back after."""
        text = str(error)
        first = self._shown.setdefault(text, nodeid)
        if first == nodeid:
            pytest.fail(text, pytrace=False)
        headline = text.splitlines()[0] if text else type(error).__name__
        if len(headline) > 200:
            headline = headline[:197] + "..."
        pytest.fail(f"{headline} [the full message is under {first}]", pytrace=False)

    def _path(self, option: str | None, default: str) -> Path:
        p = Path(option or default)
        return p if p.is_absolute() else Path(self.config.rootpath) / p

    def profile(self) -> Profile:
        if self._profile is None:
            opt = self.config.getoption("perf_profile")
            default = self.config.getini("perf_profile") or DEFAULT_PROFILE
            path = Path(opt) if opt else self._path(None, default)
            try:
                self._profile = load_profile(path)
            except PerfgateError as e:
                # Raised during collection: pytest shows a CollectError's message alone, no traceback.
                raise pytest.Collector.CollectError(f"perfgate: {e}") from None
        return self._profile

    def results_dir(self) -> Path | None:
        opt = self.config.getoption("perf_results")
        return Path(opt) if opt else None

    def gate_session(self) -> Session:
        if self.session is None:
            cfg = self.config
            results = self.results_dir()
            log_dir = results if results else Path(cfg.rootpath) / ".perfgate-cache" / "logs"
            options = SessionOptions(
                baselines_dir=self._path(cfg.getoption("perf_baselines"), "baselines"),
                log_dir=log_dir,
                base_url=cfg.getoption("perf_base_url") or "",
                update_baselines=cfg.getoption("perf_update_baselines"),
                accept_regression=cfg.getoption("perf_accept_regression"),
                repeats=cfg.getoption("perf_repeats"),
                lock_wait_s=cfg.getoption("perf_lock_wait"),
            )
            self.session = Session(self.profile(), options)
        return self.session

    def close(self) -> None:
        if self.session is not None:
            self.teardown_notes = self.session.close()

    def summary(self) -> RunSummary:
        assert self.session is not None, "summary() before the session started"
        return self.session.summary(tuple(self.teardown_notes))


STATE_KEY = pytest.StashKey[PluginState]()
