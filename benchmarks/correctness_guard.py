"""The correctness guard on the simulator: its cost, its false alarms, and what it detects.

Every run is a fresh boot of the profile's simulator through perfgate's own session (boot, then
the probe, exactly as a gate run does), held to the reference recorded in ``--baselines`` (the
committed ``baselines/sim-glm5`` by default; nothing is written there):

- false alarms: ``--unchanged`` boots of the unchanged simulator, cycling through probe
  concurrencies (the reference was recorded at the profile's own), each must pass;
- detection: each fault (``PERFGATE_SIM_CORRUPT_RATE`` 1 % and 5 %, ``PERFGATE_SIM_NAN_LOGPROBS``,
  ``PERFGATE_SIM_CORRUPT_ABOVE_BATCH``), ``--faulty`` boots each, must fail, and the metrics that
  failed are listed;
- cost: the probe's seconds per boot; with ``--with-gate`` also one whole ``pytest perf_tests``
  gate run of the profile (its wall seconds, the probe included), for the probe's share of it.

Last stdout line: one JSON object.

    python benchmarks/correctness_guard.py [--profile profiles/sim-glm5.toml] [--unchanged 20] [--faulty 3]
        [--with-gate]
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import tempfile
import time
from dataclasses import replace
from pathlib import Path
from typing import Any

from perfgate._stats import median
from perfgate.profile import Profile, load_profile
from perfgate.session import Session, SessionOptions

REPO = Path(__file__).resolve().parents[1]
# Probe concurrencies the unchanged boots cycle through: batching changes numerics, and the
# reference was recorded at the profile's own (8 and 1024 for sim-glm5).
CONCURRENCIES = ((8, 1024), (1, 64), (4, 256), (16, 512), (2, 32))
FAULTS = {
    "corrupt 1%": {"PERFGATE_SIM_CORRUPT_RATE": "0.01"},
    "corrupt 5%": {"PERFGATE_SIM_CORRUPT_RATE": "0.05"},
    "NaN logprobs": {"PERFGATE_SIM_NAN_LOGPROBS": "1"},
    "corrupt above batch 16": {"PERFGATE_SIM_CORRUPT_ABOVE_BATCH": "16"},
}


def _probe_once(
    profile: Profile, baselines: Path, env: dict[str, str], concurrencies: tuple[int, ...]
) -> dict[str, Any]:
    probed = replace(
        profile,
        server=replace(profile.server, env={**profile.server.env, **env}),
        correctness=replace(profile.correctness, concurrencies=concurrencies),
    )
    with tempfile.TemporaryDirectory() as tmp:
        session = Session(probed, SessionOptions(baselines_dir=baselines, log_dir=Path(tmp) / "logs"))
        try:
            start = time.monotonic()
            session.server()
            boot_and_probe_s = time.monotonic() - start
        finally:
            session.stack.close()
    result = session.correctness
    assert result is not None and result.ran
    if result.error:
        raise SystemExit(f"the probe stopped: {result.error}")
    assert result.outcome is not None and result.verdict is not None
    return {
        "passed": result.passed,
        "held_to": result.outcome.reference,
        "probe_s": round(result.outcome.duration_s, 2),
        "boot_and_probe_s": round(boot_and_probe_s, 2),
        "failed": sorted(m.metric for m in result.verdict.failures),
        "metrics": {k: round(v, 6) for k, v in result.outcome.metrics.items() if v == v},
    }


def _gate_run_s(profile: Path, baselines: Path) -> float:
    """Wall seconds of one whole gate run of ``profile`` (the probe included)."""
    start = time.monotonic()
    proc = subprocess.run(
        [
            *(sys.executable, "-m", "pytest", "perf_tests", "-q", "-p", "no:cacheprovider"),
            *(f"--perf-profile={profile}", f"--perf-baselines={baselines}"),
        ],
        cwd=REPO,
        capture_output=True,
        text=True,
        check=False,
    )
    took = time.monotonic() - start
    if proc.returncode != 0:
        # Still the run's cost; say why it failed (a loaded host can make a workload invalid).
        failed = [line for line in proc.stdout.splitlines() if line.startswith("FAILED")]
        print(f"note: the gate run exited {proc.returncode}: {failed}")
    return took


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--profile", type=Path, default=REPO / "profiles" / "sim-glm5.toml")
    ap.add_argument("--baselines", type=Path, default=REPO / "baselines")
    ap.add_argument("--unchanged", type=int, default=20, help="unchanged boots (false-alarm rate)")
    ap.add_argument("--faulty", type=int, default=3, help="boots per fault (detection rate)")
    ap.add_argument("--with-gate", action="store_true", help="also time one whole gate run, for the probe's share")
    args = ap.parse_args()
    profile = load_profile(args.profile)

    unchanged = []
    for i in range(args.unchanged):
        c = CONCURRENCIES[i % len(CONCURRENCIES)]
        run = _probe_once(profile, args.baselines, {}, c)
        unchanged.append(run)
        print(
            f"unchanged #{i + 1} c{c}: {'pass' if run['passed'] else 'FALSE ALARM ' + str(run['failed'])} "
            f"in {run['probe_s']} s; max |Δ| {run['metrics'].get('correctness_logprob_delta_max')}"
        )
    detection: dict[str, Any] = {}
    for name, env in FAULTS.items():
        runs = [_probe_once(profile, args.baselines, env, CONCURRENCIES[0]) for _ in range(args.faulty)]
        caught = sum(not r["passed"] for r in runs)
        detection[name] = {"caught": caught, "runs": len(runs), "failed_metrics": runs[0]["failed"]}
        print(f"{name}: caught {caught} of {len(runs)}; failed {runs[0]['failed']}")
    own = [
        r
        for r, c in zip(unchanged, (CONCURRENCIES[i % len(CONCURRENCIES)] for i in range(len(unchanged))))
        if c == CONCURRENCIES[0]
    ]
    out: dict[str, Any] = {
        "profile": str(args.profile),
        "unchanged_runs": len(unchanged),
        "false_alarms": sum(not r["passed"] for r in unchanged),
        "unchanged_max_delta_max": max(r["metrics"]["correctness_logprob_delta_max"] for r in unchanged),
        "unchanged_max_delta_mean": max(r["metrics"]["correctness_logprob_delta_mean"] for r in unchanged),
        "unchanged_max_argmax_mismatch": max(r["metrics"]["correctness_argmax_mismatch"] for r in unchanged),
        "probe_s_median_at_profile_concurrencies": median([r["probe_s"] for r in own]) if own else None,
        "detection": detection,
    }
    if args.with_gate:
        gate_s = _gate_run_s(args.profile, args.baselines)
        out["gate_run_s"] = round(gate_s, 1)
        if own:
            out["probe_share_of_gate_run"] = round(out["probe_s_median_at_profile_concurrencies"] / gate_s, 4)
    print(json.dumps(out))


if __name__ == "__main__":
    main()
