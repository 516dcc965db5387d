"""Expected outcomes of a GPU end-to-end script's stages, read from JUnit XML and results JSON.

    python benchmarks/_gpu_report.py WORK_DIR EXPECT_JSON [CONTEXT_JSON]

EXPECT_JSON maps stage -> {test id: "passed" | "failure" | "error" | "skipped"}, and may hold
"_messages": {stage: {test id: text the failure message must contain}}. Each stage's files are
WORK_DIR/STAGE/junit.xml and the newest WORK_DIR/STAGE/results-*.json. Prints a summary, then
one JSON object as the last line; exit 0 only when every expectation held.
"""

from __future__ import annotations

import glob
import json
import sys
import xml.etree.ElementTree as ET
from typing import Any

FIGURES = (
    "output_throughput",
    "total_throughput",
    "mean_tpot_ms",
    "p99_tpot_ms",
    "mean_ttft_ms",
    "steady_window_s",
    "steady_output_throughput",
    "steady_mean_tpot_ms",
    "concurrency",
    "completed",
    "failed",
    "gpu_power_mean_w",
    "gpu_power_min_w",
    "energy_j",
    "output_tokens_per_j",
    "tensor_util_min_pct",
    "sm_util_min_pct",
    "dram_util_mean_pct",
    "util_gpu_mean_pct",
)


def outcomes(work: str, stage: str) -> dict[str, tuple[str, str]]:
    """test id -> (outcome, message) from the stage's JUnit XML ({} when it has none)."""
    try:
        root = ET.parse(f"{work}/{stage}/junit.xml").getroot()
    except (OSError, ET.ParseError):
        return {}
    out = {}
    for case in root.iter("testcase"):
        status, message = "passed", ""
        for tag in ("failure", "error", "skipped"):
            node = case.find(tag)
            if node is not None:
                status, message = tag, (node.get("message") or node.text or "").strip()
        out[str(case.get("name"))] = (status, message)
    return out


def results(work: str, stage: str) -> dict[str, Any] | None:
    paths = sorted(glob.glob(f"{work}/{stage}/results-*.json"))
    if not paths:
        return None
    with open(paths[-1], encoding="utf-8") as f:
        doc: dict[str, Any] = json.load(f)
    return doc


def explain_entry(ex: dict[str, Any], top: int = 5) -> dict[str, Any]:
    """A workload's explain slice in brief: its table's top rows, the diff's top rows, the costs."""
    table = ex.get("table") or {}
    diff = ex.get("diff") or {}
    out: dict[str, Any] = {
        "note": "; ".join(n for n in [ex.get("note"), *(ex.get("notes") or [])] if n),
        "capture_s": ex.get("capture_s"),
        "reduce_s": ex.get("reduce_s"),
        "trace_bytes": table.get("trace_bytes"),
        "source": table.get("source"),
        "steps": table.get("steps"),
        "step_ms": table.get("step_ms"),
        "step_kinds": table.get("step_kinds"),
        "step_tokens": table.get("step_tokens"),
        "rows": [
            [r["key"], round(r["per_step_ms"], 4), round(r["step_share"], 3)] for r in table.get("rows", [])[:top]
        ],
    }
    if diff:
        out["diff"] = {
            k: diff.get(k)
            for k in ("explains", "ranked_by", "step_change_ratio", "before_kinds", "after_kinds", "note")
        }
        out["diff"]["rows"] = [
            [
                r["key"],
                r["status"],
                round(r["before_ms_per_step"], 4),
                round(r["after_ms_per_step"], 4),
                round(r.get("before_step_share", 0.0), 3),
                round(r["after_step_share"], 3),
            ]
            for r in diff.get("rows", [])[:top]
        ]
    return out


def stage_entry(work: str, stage: str) -> tuple[dict[str, Any], bool]:
    """The stage's tests, failure messages and per-workload figures; whether it left results."""
    got = outcomes(work, stage)
    entry: dict[str, Any] = {
        "tests": {k: v[0] for k, v in got.items()},
        "messages": {k: v[1] for k, v in got.items() if v[0] != "passed"},
    }
    doc = results(work, stage)
    if not doc:
        return entry, False
    entry["gpus"] = [f"{g.get('name')} ({g.get('power_limit_w')} W limit)" for g in doc.get("gpus") or []]
    entry["boot_s"] = (doc.get("server") or {}).get("boot_s")
    entry["versions"] = (doc.get("server") or {}).get("versions") or doc.get("versions")
    entry["workloads"] = {}
    for wl in doc["workloads"]:
        reps = wl["repeats"]
        rep = reps[-1] if reps else {}
        values = rep.get("values", {})
        window = (rep.get("telemetry") or {}).get("window") or {}
        figures: dict[str, Any] = {k: round(values[k], 4) for k in FIGURES if values.get(k) is not None}
        figures["repeats_output_throughput"] = [
            round(r.get("values", {}).get("output_throughput") or 0.0, 1) for r in reps
        ]
        figures["power_method"] = [g.get("power_method") for g in window.get("gpus", [])]
        figures["integrated_power_w"] = [g.get("integrated_power_w") for g in window.get("gpus", [])]
        figures["errors"] = rep.get("errors", {})
        first_error = next((r["error"] for r in rep.get("requests", []) if r.get("error")), "")
        if first_error:
            figures["first_error"] = first_error
        if wl.get("explain"):
            figures["explain"] = explain_entry(wl["explain"])
        figures["valid"] = wl["valid"]
        figures["baseline"] = wl["baseline"]["note"] or wl["baseline"]["path"]
        entry["workloads"][wl["workload"]] = figures
    entry["errors"] = doc.get("errors", {})
    return entry, True


def check(work: str, expect: dict[str, Any], context: dict[str, Any]) -> dict[str, Any]:
    """The report: every stage's entry, and each expectation that did not hold under "problems"."""
    report: dict[str, Any] = {**context, "stages": {}}
    problems: list[str] = []
    messages = expect.get("_messages", {})
    for stage, wanted in expect.items():
        if stage.startswith("_"):
            continue
        entry, has_results = stage_entry(work, stage)
        if not has_results:
            problems.append(f"{stage}: no results JSON (the stage did not finish)")
        for test, status in wanted.items():
            have = entry["tests"].get(test, "missing")
            if have != status:
                problems.append(f"{stage}: {test} is {have}, expected {status}")
        for test, needle in messages.get(stage, {}).items():
            text = entry["messages"].get(test, "")
            if text and needle not in text:
                problems.append(f"{stage}: {test} failed without {needle!r} in its message: {text[:200]}")
        report["stages"][stage] = entry
    report["problems"] = problems
    report["ok"] = not problems
    return report


def show(report: dict[str, Any], title: str) -> None:
    print(f"\n==================== {title} summary ====================")
    for stage, entry in report["stages"].items():
        print(f"--- {stage}: " + ", ".join(f"{t} {s}" for t, s in sorted(entry.get("tests", {}).items())))
        if entry.get("boot_s") is not None:
            print(f"  boot {entry['boot_s']:.1f} s")
        for name, f in entry.get("workloads", {}).items():
            print(
                f"  {name}: "
                + ", ".join(f"{k} {v}" for k, v in f.items() if k not in ("errors", "first_error", "explain"))
            )
            if f.get("explain"):
                print(f"    explain: {json.dumps(f['explain'])}")
            if f.get("first_error"):
                print(f"    errors {f['errors']}; first: {f['first_error']}")
        for test, msg in entry.get("messages", {}).items():
            print(f"  {test}: {msg}")
    problems = report["problems"]
    print("problems: " + ("; ".join(problems) if problems else "none"))
    print("RESULT: " + ("every expectation held" if not problems else "FAILED"))
    print(json.dumps(report, sort_keys=True))


def main(argv: list[str]) -> int:
    if len(argv) not in (2, 3):
        print(__doc__, file=sys.stderr)
        return 2
    context = json.loads(argv[2]) if len(argv) == 3 else {}
    report = check(argv[0], json.loads(argv[1]), context)
    show(report, str(context.get("script", "gpu")))
    return 0 if report["ok"] else 1


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
