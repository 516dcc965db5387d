"""Per-pytest-run state: the profile (loaded once) and the gate session (booted on first use)."""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path
from typing import NoReturn

import pytest

from perfgate._files import Artefacts
from perfgate._redact import SECRETS
from perfgate.ab import PLUGIN_FLAGS, AbOptions, AbSummary, Candidate, candidate_from, plan_ab, rounds_from, run_ab
from perfgate.errors import PerfgateError
from perfgate.plugin._progress import ProgressLine
from perfgate.plugin._xdist import refuse_on_worker
from perfgate.profile import Profile, load_profile
from perfgate.session import LOG_DIR, RunSummary, Session, SessionOptions

DEFAULT_PROFILE = "profiles/sim-glm5.toml"


class PluginState:
    def __init__(self, config: pytest.Config) -> None:
        self.config = config
        self._profile: Profile | None = None
        self.session: Session | None = None
        self.ab: AbSummary | None = None
        self._ab_error: PerfgateError | None = None
        self.teardown_notes: list[str] = []
        # The results files written at the session's end, and those that could not be.
        self.artefacts = Artefacts()
        # Error message -> the test that showed it in full; later tests hit by the same error
        # (every test of a workload, every workload after a failed boot) get one line.
        self._shown: dict[str, str] = {}
        # The probe's failure when no test reported it (test_correctness deselected): the run fails all the same.
        self.unreported_correctness = ""

    def fail_once(self, error: Exception, nodeid: str) -> NoReturn:
        """Fail the current test with ``error``: in full the first time, as one line referring back after."""
        text = str(error)
        first = self._shown.setdefault(text, nodeid)
        if first == nodeid:
            pytest.fail(text, pytrace=False)
        headline = text.splitlines()[0] if text else type(error).__name__
        if len(headline) > 200:
            headline = SECRETS.clip(headline, 197) + "..."
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

    def baselines_dir(self) -> Path:
        return self._path(self.config.getoption("perf_baselines"), "baselines")

    def results_dir(self) -> Path | None:
        opt = self.config.getoption("perf_results")
        return Path(opt) if opt else None

    def gate_session(self) -> Session:
        if self.session is None:
            cfg = self.config
            refuse_on_worker(cfg)
            results = self.results_dir()
            log_dir = results if results else Path(cfg.rootpath) / LOG_DIR
            options = SessionOptions(
                baselines_dir=self.baselines_dir(),
                log_dir=log_dir,
                base_url=cfg.getoption("perf_base_url") or "",
                update_baselines=cfg.getoption("perf_update_baselines"),
                accept_regression=cfg.getoption("perf_accept_regression"),
                repeats=cfg.getoption("perf_repeats"),
                boots=cfg.getoption("perf_boots"),
                lock_wait_s=cfg.getoption("perf_lock_wait"),
                explain=cfg.getoption("perf_explain"),
            )
            self.session = Session(self.profile(), options)
        return self.session

    @property
    def ab_mode(self) -> bool:
        return bool(self.config.getoption("perf_ab"))

    def ab_candidate(self) -> Candidate:
        """B's change from the --perf-candidate-* options (PerfgateError naming a bad one)."""
        return candidate_from(self.config.getoption, PLUGIN_FLAGS)

    def ab_options(self) -> AbOptions:
        cfg = self.config
        results = self.results_dir()
        rounds, max_rounds = rounds_from(cfg.getoption, PLUGIN_FLAGS)
        options = AbOptions(
            rounds=rounds,
            max_rounds=max_rounds,
            log_dir=results if results else Path(cfg.rootpath) / LOG_DIR,
            baselines_dir=self.baselines_dir(),
            accept_candidate=cfg.getoption(PLUGIN_FLAGS.accept_candidate),
            reason=cfg.getoption(PLUGIN_FLAGS.reason),
            lock_wait_s=cfg.getoption(PLUGIN_FLAGS.lock_wait),
            flags=PLUGIN_FLAGS,
            explain=cfg.getoption("perf_explain") or self.profile().explain.enabled,
        )
        options.check()
        return options

    def check_ab(self) -> None:
        """Everything about the A/B that can be refused before a boot (PerfgateError)."""
        plan_ab(self.profile(), self.ab_candidate(), self.ab_options())

    def ab_summary(self, items: list[pytest.Item]) -> AbSummary:
        """The A/B over the workloads of the collected ``items`` (run on first use; an error is raised again)."""
        if self._ab_error is not None:
            raise self._ab_error
        if self.ab is None:
            refuse_on_worker(self.config)
            selected = {
                item.callspec.params["perf_workload"].name
                for item in items
                if hasattr(item, "callspec") and "perf_workload" in item.callspec.params
            }
            profile = self.profile()
            subset = replace(profile, workloads=tuple(w for w in profile.workloads if w.name in selected))
            progress = ProgressLine(self.config, "ab")
            try:
                self.ab = run_ab(
                    subset, self.ab_candidate(), self.ab_options(), on_event=progress.note, on_progress=progress
                )
            except PerfgateError as e:
                self._ab_error = e
                raise
        return self.ab

    def close(self) -> None:
        if self.session is not None:
            self.teardown_notes = self.session.stack.close()

    def summary(self) -> RunSummary:
        assert self.session is not None, "summary() before the session started"
        return self.session.summary(tuple(self.teardown_notes))


STATE_KEY = pytest.StashKey[PluginState]()
