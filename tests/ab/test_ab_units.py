"""The A/B's parts without servers: order, workload selection, candidates, options, the round
loop (with scripted sessions), the outcome and the report."""

from __future__ import annotations

import argparse
import os
import sys
from dataclasses import replace
from pathlib import Path
from types import SimpleNamespace

import pytest

from perfgate.ab import (
    CLI_FLAGS,
    DEFAULT_ROUNDS,
    PLUGIN_FLAGS,
    AbFlags,
    AbOptions,
    AbSummary,
    Candidate,
    abba_order,
    add_ab_options,
    candidate_from,
    parse_args,
    parse_env,
    plan_ab,
    rounds_from,
    run_ab,
    select_workloads,
    variants,
)
from perfgate.baseline import Baseline, BaselineStore
from perfgate.errors import PerfgateError, ProfileError
from perfgate.profile import GateSpec, Profile, ServerSpec, TelemetrySpec, Workload
from perfgate.report import report_lines
from perfgate.server.autotune import read_tactics
from perfgate.session import RunSummary, ServerSummary, WorkloadResult
from perfgate.verdict import ToleranceCheck, judge_paired, rules_for
from tests.autotune.test_tactics import VERSIONS, cache_dir, tactics, write_cache
from tests.baseline.baseline_factories import fingerprint


def _workload(name: str) -> Workload:
    return Workload(name=name, num_prompts=8, concurrency=4, input_len=16, output_len=8)


def _profile(*names: str, server: ServerSpec | None = None, gate: GateSpec | None = None) -> Profile:
    return Profile(
        path=Path("profiles/p.toml"),
        name="p",
        description="",
        server=server or ServerSpec(kind="simulator"),
        telemetry=TelemetrySpec(source="none"),
        workloads=tuple(_workload(n) for n in names or ("c64-in256-out128", "c1024-in256-out128")),
        gate=gate or GateSpec(),
    )


# -- order ----------------------------------------------------------------------------------


def test_abba_order_alternates_and_continues_across_calls() -> None:
    assert abba_order(1, 4) == [(1, "A"), (1, "B"), (2, "B"), (2, "A"), (3, "A"), (3, "B"), (4, "B"), (4, "A")]
    assert abba_order(5, 2) == [(5, "A"), (5, "B"), (6, "B"), (6, "A")]
    # Over each pair of rounds, B's mean position equals A's: a linear trend cancels.
    order = abba_order(1, 6)
    for block in range(3):
        runs = order[4 * block : 4 * block + 4]
        assert sum(i for i, (_, v) in enumerate(runs) if v == "A") == sum(
            i for i, (_, v) in enumerate(runs) if v == "B"
        )


def test_abba_cancels_a_drifting_host_where_ab_order_would_not() -> None:
    """The host slows 2 % per run, A and B identical: with ABBA the ratios straddle 1 and the
    A/B passes at 1 % tolerance; always-A-first makes every ratio 1.02 and would fail."""
    rules = rules_for(replace(GateSpec(), tolerance={"mean_tpot_ms": 0.01}), _workload("w"))
    rules = [r for r in rules if r.metric == "mean_tpot_ms"]

    def tpot(position: int) -> dict[str, float]:
        return {"mean_tpot_ms": 20.0 * 1.02**position}

    abba = abba_order(1, 6)
    a = [tpot(i) for i, (_, v) in enumerate(abba) if v == "A"]
    b = [tpot(i) for i, (_, v) in enumerate(abba) if v == "B"]
    (m,) = judge_paired("w", rules, a, b).metrics
    assert m.status == "pass" and m.rounds_worse == 3
    always_ab = [tpot(2 * i) for i in range(6)], [tpot(2 * i + 1) for i in range(6)]
    (m,) = judge_paired("w", rules, *always_ab).metrics
    assert m.status == "fail" and m.median_ratio == pytest.approx(1.02)


# -- workload selection: pytest's -k --------------------------------------------------------


@pytest.mark.parametrize(
    ("expression", "selected"),
    [
        ("", ["c64-in256-out128", "c1024-in256-out128", "c64-in4096-out128"]),
        ("c64", ["c64-in256-out128", "c64-in4096-out128"]),
        ("C1024", ["c1024-in256-out128"]),
        ("not c1024", ["c64-in256-out128", "c64-in4096-out128"]),
        ("c64 and in4096", ["c64-in4096-out128"]),
        ("c1024 or in4096", ["c1024-in256-out128", "c64-in4096-out128"]),
        ("(c64 or c1024) and not in4096", ["c64-in256-out128", "c1024-in256-out128"]),
        ("out128", ["c64-in256-out128", "c1024-in256-out128", "c64-in4096-out128"]),
    ],
)
def test_k_selects_as_pytest_does(expression: str, selected: list[str]) -> None:
    profile = _profile("c64-in256-out128", "c1024-in256-out128", "c64-in4096-out128")
    assert [w.name for w in select_workloads(profile, expression)] == selected


def test_k_that_selects_nothing_or_does_not_parse_is_an_error() -> None:
    profile = _profile()
    with pytest.raises(PerfgateError) as e:
        select_workloads(profile, "c2048")
    assert (
        str(e.value)
        == "-k 'c2048' selects no workload of profile profiles/p.toml; its workloads are c64-in256-out128, "
        "c1024-in256-out128"
    )
    with pytest.raises(
        PerfgateError,
        match=r"-k 'c64 and': not a keyword expression \(expected not OR left parenthesis OR identifier; got end "
        r"of input\)",
    ):
        select_workloads(profile, "c64 and")
    with pytest.raises(PerfgateError, match=r"-k 'c64\(x=1\)': .*call parameters"):
        select_workloads(profile, "c64(x=1)")


# -- candidates -------------------------------------------------------------------------------


def test_parse_env_and_args() -> None:
    assert parse_env(["A=1", "B=", "A=2", "C=x=y"]) == {"A": "2", "B": "", "C": "x=y"}
    assert parse_args('--foo 1 --bar "a b"') == ("--foo", "1", "--bar", "a b")
    with pytest.raises(PerfgateError, match=r"--candidate-env 'NOEQUALS': expected NAME=VALUE"):
        parse_env(["NOEQUALS"])
    # The value of a malformed item is not shown: it may be a token.
    with pytest.raises(PerfgateError, match=r"--candidate-env '1X=\.\.\.': expected NAME=VALUE") as e:
        parse_env(["1X=hf_0123456789abcdef"])
    assert "hf_0123456789abcdef" not in str(e.value)
    with pytest.raises(PerfgateError, match=r"--candidate-args '--foo \"1': No closing quotation; quote the flags"):
        parse_args('--foo "1')


def _script(tmp_path: Path, body: str = "", executable: bool = True) -> Path:
    path = tmp_path / "python-b"
    path.write_text(f'#!/bin/sh\n{body}exec "{sys.executable}" "$@"\n')
    path.chmod(0o755 if executable else 0o644)
    return path


def test_variants_b_is_the_profile_with_the_change(tmp_path: Path) -> None:
    profile = _profile(server=ServerSpec(kind="simulator", env={"X": "1"}, args=("--noise", "0.01")))
    py = _script(tmp_path)
    a, b = variants(profile, Candidate(python=str(py), env={"Y": "2"}, args=("--drift", "0")))
    assert a.profile is profile and a.python == sys.executable and (a.extra_env, a.extra_args) == ({}, ())
    assert b.profile.server.python == str(py) and b.python == str(py)
    assert dict(b.profile.server.env) == {"X": "1", "Y": "2"}
    assert b.profile.server.args == ("--noise", "0.01", "--drift", "0")
    assert (a.role, b.role) == ("current", "candidate")
    assert b.profile.workloads == profile.workloads and b.profile.gate == profile.gate


@pytest.mark.parametrize(
    ("server", "candidate", "message"),
    [
        (ServerSpec(kind="simulator"), Candidate(), "no candidate: give what B changes with --candidate-python PY"),
        (
            ServerSpec(kind="attach", base_url="http://127.0.0.1:1"),
            Candidate(env={"X": "1"}),
            'kind = "attach" is a server someone else started',
        ),
        (
            ServerSpec(kind="simulator"),
            Candidate(python="/nonexistent/bin/python"),
            "--candidate-python /nonexistent/bin/python: no such interpreter",
        ),
        (ServerSpec(kind="simulator"), Candidate(python="no-such-python-anywhere"), "no such interpreter"),
        (
            ServerSpec(kind="command", command=("/usr/bin/server", "--port", "{port}")),
            Candidate(python=sys.executable),
            "[server] command does not use {python}, so --candidate-python would change nothing",
        ),
    ],
)
def test_variants_refuses_what_cannot_differ_or_boot(server: ServerSpec, candidate: Candidate, message: str) -> None:
    with pytest.raises(PerfgateError) as e:
        variants(_profile(server=server), candidate)
    assert message in str(e.value)


def test_candidate_python_must_be_executable(tmp_path: Path) -> None:
    py = _script(tmp_path, executable=False)
    with pytest.raises(PerfgateError, match="not executable"):
        variants(_profile(), Candidate(python=str(py)))


@pytest.mark.parametrize(
    ("options", "message"),
    [
        (AbOptions(rounds=0), "--rounds 0: expected an integer >= 1"),
        (AbOptions(rounds=10**6), "--rounds 1000000: expected an integer from 1 to 1,000"),
        (AbOptions(rounds=4, max_rounds=3), "--max-rounds 3: expected at least --rounds (4)"),
        (AbOptions(reason="why"), "--reason only applies with --accept-candidate"),
        (AbOptions(accept_candidate=True, reason=" "), "--reason is empty"),
        (AbOptions(lock_wait_s=-1), "--lock-wait -1: expected a number >= 0"),
        (AbOptions(lock_wait_s=1e308), "--lock-wait 1e+308: expected a number >= 0 and <= 86,400"),
    ],
)
def test_bad_options(options: AbOptions, message: str) -> None:
    with pytest.raises(PerfgateError) as e:
        options.check()
    assert message in str(e.value)
    assert AbOptions(rounds=3).most_rounds == 6


# -- the round loop, with scripted sessions -------------------------------------------------


class _Repeat:
    """The parts of a RepeatResult the A/B reads."""

    def __init__(self, values: dict[str, float], client_valid: bool = True, failed: int = 0) -> None:
        self.values = values
        self.telemetry = None
        client = SimpleNamespace(
            valid=client_valid,
            reason="" if client_valid else "event-loop lag p99 900 ms > 200 ms",
            advice="run on a quieter host",
        )
        self.load = SimpleNamespace(client=client, records=[None] * 8)
        self.metrics = SimpleNamespace(failed=failed)

    def flat_metrics(self) -> dict[str, float]:
        return dict(self.values)


class _Script:
    """Sessions that measure what ``tpot(variant, workload, boot index)`` says: a number, or
    (number, "paced") for a run the client paced, (number, "failed") for one with failed
    requests, or an exception to raise."""

    def __init__(
        self, tpot, teardown_notes: dict[str, list[str]] | None = None, autotune: dict[str, dict] | None = None
    ) -> None:
        self.tpot = tpot
        self.teardown_notes = teardown_notes or {}
        # variant -> the autotune record its server's provenance holds (an SGLang launch's)
        self.autotune = autotune or {}
        self.boots: list[tuple[str, tuple[str, ...]]] = []

    def session(self, profile: Profile, options: object) -> object:
        script = self
        label = "B" if "B" in profile.server.env else "A"
        index = len(self.boots)
        self.boots.append((label, ()))

        class Session:
            def __init__(self) -> None:
                self.results: dict[str, WorkloadResult] = {}

            def measure(self, w: Workload, on_progress: object = None) -> WorkloadResult:
                script.boots[index] = (label, (*script.boots[index][1], w.name))
                value = script.tpot(label, w.name, index)
                if isinstance(value, Exception):
                    self.results[w.name] = WorkloadResult(workload=w.name, repeats=[], error=str(value))
                    raise value
                value, kind = value if isinstance(value, tuple) else (value, "")
                repeat = _Repeat(
                    {"mean_tpot_ms": value}, client_valid=kind != "paced", failed=3 if kind == "failed" else 0
                )
                reasons = {
                    "paced": ["repeat 1: the load client, not the server, set the pace"],
                    "failed": ["repeat 1: 3 of 8 requests failed"],
                }
                result = WorkloadResult(workload=w.name, repeats=[repeat], invalid_reasons=reasons.get(kind, []))  # type: ignore[list-item]
                self.results[w.name] = result
                return result

            def server(self) -> object:
                # No server here: the A/B's correctness probe is left out (tests/ab/test_ab_e2e.py runs it).
                raise PerfgateError("scripted session: no server to probe")

            class stack:
                @staticmethod
                def close() -> list[str]:
                    return list(script.teardown_notes.get(label, []))

            def summary(self, notes: tuple[str, ...]) -> RunSummary:
                provenance: dict[str, object] = {"versions": {"server": label}}
                if label in script.autotune:
                    provenance["autotune"] = script.autotune[label]
                server = ServerSummary("simulator", "m", "http://127.0.0.1:1", "0.5.23", 0.5, provenance)
                return RunSummary("p", "profiles/p.toml", server, (), "", "off", (), {}, {}, (), notes)

        return Session()


def _run(monkeypatch: pytest.MonkeyPatch, script: _Script, **options: object) -> AbSummary:
    monkeypatch.setattr("perfgate.ab._run.Session", script.session)
    gate = replace(GateSpec(), tolerance={"mean_tpot_ms": 0.03})
    return run_ab(_profile(gate=gate), Candidate(env={"B": "1"}), AbOptions(**options))  # type: ignore[arg-type]


def test_rounds_boot_abba_and_judge_b_against_a(monkeypatch: pytest.MonkeyPatch) -> None:
    script = _Script(lambda label, w, i: 21.0 if label == "B" else 20.0)
    summary = _run(monkeypatch, script, rounds=6)
    assert [label for label, _ in script.boots] == ["A", "B", "B", "A"] * 3
    assert all(names == ("c64-in256-out128", "c1024-in256-out128") for _, names in script.boots)
    assert summary.order == tuple(abba_order(1, 6))
    assert summary.outcome == "regression"
    for w in summary.workloads:
        (m,) = w.verdict.metrics
        assert (m.status, m.n_pairs, m.median_ratio) == ("fail", 6, pytest.approx(1.05))
    assert [v.versions()["server"] for v in summary.variants] == ["A", "B"]


def test_inconclusive_adds_rounds_for_the_undecided_workloads_only(monkeypatch: pytest.MonkeyPatch) -> None:
    # c64: B 5 % slower in all but every third boot, so 6 rounds cannot decide; c1024: B the same.
    def tpot(label: str, w: str, i: int) -> float:
        if w.startswith("c1024") or label == "A":
            return 20.0
        return 19.0 if i % 3 == 0 else 21.0

    script = _Script(tpot)
    summary = _run(monkeypatch, script, rounds=6, max_rounds=10)
    assert summary.rounds_run == 10
    assert all(names == ("c64-in256-out128",) for _, names in script.boots[12:])
    c64, c1024 = summary.workloads
    assert c64.verdict.metrics[0].n_pairs == 10 and c1024.verdict.metrics[0].n_pairs == 6
    # B better in 3 of 10 rounds: the sign test cannot confirm the 5 % median.
    assert (c64.status, c64.verdict.metrics[0].rounds_worse, c1024.status) == ("inconclusive", 7, "pass")
    assert summary.outcome == "inconclusive"
    assert report_lines(summary)[1].startswith(
        "rounds: 10 (6 planned, 4 more for discarded runs or inconclusive verdicts, at most 10)"
    )


def test_a_variant_that_fails_stops_the_ab_and_nothing_passes(monkeypatch: pytest.MonkeyPatch) -> None:
    script = _Script(
        lambda label, w, i: PerfgateError("server exited with code 1 before it answered") if label == "B" else 20.0
    )
    summary = _run(monkeypatch, script, rounds=6)
    assert [label for label, _ in script.boots] == ["A", "B"]
    assert (
        summary.stopped
        == "round 1, B (candidate), workload c64-in256-out128: server exited with code 1 before it answered"
    )
    assert summary.outcome == "error"
    c64, _ = summary.workloads
    assert c64.verdict is None and c64.status == "error"
    assert "round 1 B: server exited with code 1 before it answered" in c64.problems
    lines = report_lines(summary)
    assert (
        "problem: stopped: round 1, B (candidate), workload c64-in256-out128: server exited with code 1 before it "
        "answered" in lines
    )
    assert lines[-1] == "ERROR: the A/B could not decide"


def test_report_shows_both_variants_the_rounds_of_a_failure_and_the_outcome(monkeypatch: pytest.MonkeyPatch) -> None:
    script = _Script(lambda label, w, i: 21.0 + i * 0.01 if label == "B" else 20.0)
    summary = _run(monkeypatch, script, rounds=6, keyword="c64")
    text = "\n".join(report_lines(summary))
    (env_row,) = [line for line in text.splitlines() if line.startswith("env B")]
    assert env_row.split() == ["env", "B", "(unset)", "1", "differs"]
    assert "server args: the same for A and B" in text
    assert "autotune A: not applicable (simulator reports no FlashInfer autotune decision)" in text
    assert "c64-in256-out128 mean_tpot_ms, per round (FAIL):" in text
    rows = text.split("c64-in256-out128 mean_tpot_ms, per round (FAIL):\n")[1].splitlines()
    assert rows[0].split() == ["round", "order", "A", "B", "B/A"]
    assert rows[2].split() == ["1", "AB", "20.00", "ms", "21.01", "ms", "1.050"]
    assert rows[3].split()[:2] == ["2", "BA"]
    assert "FAIL         c64-in256-out128: mean_tpot_ms B/A 1.05" in text
    assert text.endswith("REGRESSION: B is worse than A")
    assert [w.name for w in summary.workloads] == ["c64-in256-out128"]


def test_a_note_every_boot_of_a_variant_makes_is_shown_once(monkeypatch: pytest.MonkeyPatch) -> None:
    notes = {"B": ["--disable-cuda-graph is deprecated", "port reused"], "A": ["slow shutdown"]}
    script = _Script(lambda label, w, i: 20.0, teardown_notes=notes)
    summary = _run(monkeypatch, script, rounds=2, keyword="c64")
    teardown = [line for line in report_lines(summary) if line.startswith("teardown")]
    assert teardown == [
        "teardown A: slow shutdown (2 boots)",
        "teardown B: --disable-cuda-graph is deprecated (2 boots)",
        "teardown B: port reused (2 boots)",
    ]


def test_env_rows_show_what_each_variant_sees(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("B", "from-host")
    script = _Script(lambda label, w, i: 20.0)
    summary = _run(monkeypatch, script, rounds=2, keyword="c64")
    a, b = summary.variants
    assert (a.env_seen, b.env_seen) == ({"B": "from-host"}, {"B": "1"})
    assert summary.outcome == "pass"
    assert report_lines(summary)[-1] == "PASS: B is not worse than A beyond any tolerance"
    assert os.environ["B"] == "from-host"


def test_a_run_the_client_paced_is_discarded_and_its_round_replaced(monkeypatch: pytest.MonkeyPatch) -> None:
    # Boot 1 (round 1's B) was paced by a starved client: its round does not count.
    script = _Script(lambda label, w, i: (30.0, "paced") if i == 1 else 20.0)
    summary = _run(monkeypatch, script, rounds=6, keyword="c64")
    (w,) = summary.workloads
    assert summary.rounds_run == 8 and w.valid_rounds == 7 and w.verdict.metrics[0].n_pairs == 7
    assert w.discarded == ["round 1 B: the client set the pace (event-loop lag p99 900 ms > 200 ms)"]
    assert w.problems == [] and summary.outcome == "pass"
    lines = report_lines(summary)
    assert (
        "discarded (round not counted): c64-in256-out128 round 1 B: the client set the pace (event-loop lag p99 "
        "900 ms > 200 ms)" in lines
    )
    assert "discarded runs of c64-in256-out128: run on a quieter host" in lines
    assert lines[1].startswith("rounds: 8 (6 planned, 2 more for discarded runs or inconclusive verdicts, at most 12)")


def test_failed_requests_are_never_discarded_and_too_few_valid_rounds_is_an_error(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    script = _Script(lambda label, w, i: (20.0, "failed") if label == "B" and i == 2 else 20.0)
    summary = _run(monkeypatch, script, rounds=6, keyword="c64")
    (w,) = summary.workloads
    assert summary.rounds_run == 6 and summary.outcome == "error"
    assert w.problems[0] == "round 2 B: repeat 1: 3 of 8 requests failed"
    assert w.problems[1].startswith("only 5 of the 6 rounds asked for had valid runs of both variants")
    # Every run paced: the A/B adds rounds up to its limit, then says it could not decide.
    script = _Script(lambda label, w, i: (20.0, "paced"))
    summary = _run(monkeypatch, script, rounds=2, max_rounds=4, keyword="c64")
    (w,) = summary.workloads
    assert summary.rounds_run == 4 and w.verdict is None and summary.outcome == "error"
    assert "no round finished with a valid run of both variants; nothing was compared" in w.problems


# -- what is refused before anything boots -------------------------------------------------


def test_plan_refuses_a_gate_nothing_measures_before_any_boot(monkeypatch: pytest.MonkeyPatch) -> None:
    def no_boot(*_: object) -> None:
        raise AssertionError("a session was started")

    monkeypatch.setattr("perfgate.ab._run.Session", no_boot)
    for gate, message in (
        (replace(GateSpec(), tolerance={"mean_tpott_ms": 0.03}), r"\[gate\]\.tolerance: .*'mean_tpott_ms'"),
        (replace(GateSpec(), floors={"capacity": 8.0}), r"\[gate\] sets capacity, which only sweeps measure"),
    ):
        with pytest.raises(ProfileError, match=r"profile profiles/p\.toml: " + message):
            plan_ab(_profile(gate=gate), Candidate(env={"B": "1"}), AbOptions())
        with pytest.raises(ProfileError, match=message):
            run_ab(_profile(gate=gate), Candidate(env={"B": "1"}), AbOptions())


def test_accepting_checks_the_store_for_the_gated_metrics(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    # A stored baseline without the gated metric would judge nothing: named before the first boot.
    BaselineStore(tmp_path).save(
        Baseline("p", "c64-in256-out128", fingerprint(), [{"output_throughput": 5.0}]), check=ToleranceCheck(())
    )
    script = _Script(lambda label, w, i: 20.0)
    summary = _run(monkeypatch, script, rounds=2, accept_candidate=True, baselines_dir=tmp_path)
    assert any("gated metric 'mean_tpot_ms' is missing from repeat(s) 1" in n for n in summary.store_notes)


# -- the options, declared once for perfgate ab and pytest --perf-ab ------------------------


@pytest.mark.parametrize("flags", [CLI_FLAGS, PLUGIN_FLAGS])
def test_options_read_back_alike_under_either_name(flags: AbFlags) -> None:
    parser = argparse.ArgumentParser(exit_on_error=False)
    add_ab_options(parser.add_argument, flags)
    c = flags.candidate
    args = parser.parse_args([f"{c}env=X=1", f"{c}args=--foo 1", flags.max_rounds, "8"])

    def get(flag: str) -> object:
        return getattr(args, flag.lstrip("-").replace("-", "_"))

    assert candidate_from(get, flags) == Candidate(env={"X": "1"}, args=("--foo", "1"))
    assert rounds_from(get, flags) == (DEFAULT_ROUNDS, 8)
    assert {a.option_strings[0] for a in parser._actions[1:]} == set(flags.ab_only)
    with pytest.raises(argparse.ArgumentError, match=f"^argument {flags.rounds}: expected an integer >= 1, got '0'"):
        parser.parse_args([flags.rounds, "0"])
    with pytest.raises(PerfgateError, match=f"^{flags.max_rounds} 3: expected at least {flags.rounds} \\(4\\)"):
        AbOptions(rounds=4, max_rounds=3, flags=flags).check()
    with pytest.raises(PerfgateError, match=f"^{c}env 'X': expected NAME=VALUE"):
        candidate_from(lambda flag: ["X"] if flag == f"{c}env" else [], flags)


def test_report_says_how_many_autotune_tactics_differ_between_a_and_b(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    """Two fresh tunes can pick other kernels: a B/A change may be the tactics, not the upgrade."""
    records = {
        label: read_tactics([write_cache(cache_dir(tmp_path / label), tactics(12, changed))], VERSIONS).to_dict()
        for label, changed in (("A", frozenset()), ("B", frozenset({3})))
    }
    autotune = {
        label: {"decision": "native", "status": "native", "ok": True, "evidence": "ran", "tactics": record}
        for label, record in records.items()
    }
    script = _Script(lambda label, w, i: 20.0, autotune=autotune)
    text = "\n".join(report_lines(_run(monkeypatch, script, rounds=2, keyword="c64")))
    assert "autotune tactics: 1 of 12 entries differ between A and B (1 changed)" in text
    assert "autotune B: decision native (SGLang native); evidence: ran; 12 tactics in 1 file (sm90" in text
