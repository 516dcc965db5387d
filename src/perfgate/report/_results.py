"""Results files of a gate session: JSON with everything, a Markdown summary, optional plots;
and :func:`read_results`, the reader of the parts of that JSON that ``perfgate compare`` uses."""

from __future__ import annotations

import itertools
import json
import math
import time
from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import asdict, dataclass, field, fields, is_dataclass
from pathlib import Path
from typing import Any

from perfgate import _json
from perfgate._files import Artefacts, append_text, describe, publish, read_named, reserve_dir
from perfgate._json import JSONInputError
from perfgate._limits import MAX_BOOTS, is_boot
from perfgate._names import file_stem, path_in
from perfgate.errors import PerfgateError
from perfgate.load import RequestRecord
from perfgate.report._table import render_markdown, rows
from perfgate.session import RepeatResult, RunSummary, SweepResult, WorkloadResult, window_json
from perfgate.verdict import MetricRule

RESULTS_SCHEMA = 1


def plain(obj: Any) -> Any:
    """Dataclasses, mappings and sequences as JSON-able data (NaN and infinities become null,
    anything else its str; a repeat's requests, made as they are written, are left as they are)."""
    if isinstance(obj, _Requests):
        return obj
    if is_dataclass(obj) and not isinstance(obj, type):
        return {k: plain(v) for k, v in asdict(obj).items()}
    if isinstance(obj, dict):
        return {str(k): plain(v) for k, v in obj.items()}
    if isinstance(obj, (list, tuple)):
        return [plain(v) for v in obj]
    if isinstance(obj, float) and not math.isfinite(obj):
        return None
    if isinstance(obj, (str, int, float, bool)) or obj is None:
        return obj
    return str(obj)


def _request_json(r: RequestRecord) -> dict[str, Any]:
    return {
        "start_s": r.start_s,
        "input_tokens": r.input_tokens,
        "output_tokens": r.output_tokens,
        "ttft_s": r.ttft_s,
        "latency_s": r.latency_s,
        "chunk_offsets_s": [round(x, 6) for x in r.chunk_offsets_s],
        "chunk_tokens": list(r.chunk_tokens),
        "error": r.error,
        "retried": r.retried,
    }


class _Requests(list):  # type: ignore[type-arg]
    """A repeat's requests as JSON objects, each made when it is read and dropped after.

    json's pure-Python encoder (the one :func:`write_documents` uses: it indents) and the plots
    see a list (it iterates, has a length and indexes), so the file's content is what a list of
    dicts gives; but a 100,000-request repeat is written in the memory of one request, not of
    12.8 million chunk offsets as Python floats (~0.5 GB). The C encoder (json.dumps without
    indent) reads a list's storage directly and would see it empty: documents for anything but
    writing keep plain lists (``stream_requests`` False).
    """

    def __init__(self, records: Sequence[RequestRecord]) -> None:
        super().__init__()
        self._records = records

    def __len__(self) -> int:
        return len(self._records)

    def __iter__(self) -> Iterator[dict[str, Any]]:
        return map(_request_json, self._records)

    def __getitem__(self, i: Any) -> Any:
        if isinstance(i, slice):
            return [_request_json(r) for r in self._records[i]]
        return _request_json(self._records[i])


def repeat_json(rep: RepeatResult, *, stream_requests: bool = False) -> dict[str, Any]:
    """One measured repeat in full: metrics, client, steady window, timeline, telemetry, every
    request (made one at a time as they are read with ``stream_requests``: see ``_Requests``)."""
    records = rep.load.records
    m = rep.metrics
    return {
        "values": rep.flat_metrics(),
        # Which boot of the server it ran on ([gate] boots): perfgate compare collapses by it.
        "boot": rep.boot,
        "start_s": rep.load.start_s,
        "end_s": rep.load.end_s,
        "client": plain(rep.load.client),
        "errors": m.errors,
        "notes": rep.notes(),
        "warmup": (
            rep.load.steady_warmup.as_json()
            if rep.load.steady_warmup is not None
            else {"mode": "requests", "requests": rep.load.warmup_requests}
        ),
        "token_gaps": {
            "max_s": rep.max_token_gap_s,
            "longest": plain(rep.longest_gap),
            "stalls": plain(rep.stalls),
        },
        "steady_window": plain(m.steady),
        "timeline": plain(m.timeline),
        "telemetry": (
            {"window": window_json(rep.telemetry), "aligned_to": rep.telemetry_note, "timeline": rep.telemetry_timeline}
            if rep.telemetry is not None
            else {"not_measured": rep.telemetry_note}
        ),
        "server_metrics": (
            {**plain(rep.server), "output_token_gap": rep.output_token_gap()}
            if rep.server is not None
            else {"not_measured": rep.server_note}
        ),
        "host_cpu": (
            {**plain(rep.host_cpu), "host_bound": rep.host_bound}
            if rep.host_cpu is not None
            else {"not_checked": rep.host_cpu_note}
        ),
        # A sample of the load's answers scored teacher-forced (null: none asked for).
        "answers": plain(rep.answers),
        "requests": _Requests(records) if stream_requests else [_request_json(r) for r in records],
    }


def _baseline_json(j: WorkloadResult | SweepResult) -> dict[str, Any]:
    """What happened to the baseline, and what changed in the server's stack since it was recorded."""
    return {
        "path": j.baseline_path,
        "note": j.baseline_note,
        "recorded": j.recorded,
        "previous": j.previous_values,
        "changes": list(j.changes),
        "improved": list(j.improved),
    }


def _workload_json(res: WorkloadResult, rules: tuple[MetricRule, ...], stream_requests: bool) -> dict[str, Any]:
    return {
        "workload": res.workload,
        "rules": plain(rules),
        "valid": res.valid,
        "invalid_reasons": res.invalid_reasons,
        "error": res.error,
        "fingerprint": plain(res.fingerprint),
        "baseline": _baseline_json(res),
        "verdict": plain(res.verdict),
        "repeats": [repeat_json(r, stream_requests=stream_requests) for r in res.repeats],
        "explain": res.explain.to_dict() if res.explain is not None else None,
    }


def _sweep_json(sw: SweepResult, rules: tuple[MetricRule, ...]) -> dict[str, Any]:
    """A sweep's curve and capacity; each point's full repeats are under "workloads" (bisected
    points, which are no workload of the profile, carry their metrics here)."""
    return {
        "sweep": sw.sweep,
        "axis": sw.axis,
        "stat": sw.stat,
        "slo": sw.slo,
        "rules": plain(rules),
        "valid": sw.valid,
        "invalid_reasons": sw.invalid_reasons,
        "error": sw.error,
        "notes": sw.notes,
        "capacities": sw.capacities,
        "capacity_boots": sw.capacity_boots(),
        "within": sw.within,
        "fingerprint": plain(sw.fingerprint),
        "baseline": _baseline_json(sw),
        "verdict": plain(sw.verdict),
        "points": [
            {
                "load": p.load,
                "workload": p.workload,
                "bisected": p.bisected,
                "medians": plain(p.medians()),
                "baseline_medians": p.baseline_values,
                "repeats": [plain(r.flat_metrics()) for r in p.repeats],
            }
            for p in sw.points
        ],
    }


def results_document(summary: RunSummary, *, stream_requests: bool = False) -> dict[str, Any]:
    """Everything the run measured and decided, as JSON-able data; ``stream_requests`` makes each
    request's object only when it is read (for :func:`write_documents`)."""
    server = summary.server
    return {
        "schema_version": RESULTS_SCHEMA,
        "created": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
        "profile": {"name": summary.profile_name, "path": summary.profile_path},
        "server": dict(server.provenance) if server else None,
        "gpus": plain(list(summary.gpus)),
        "telemetry_note": summary.telemetry_note,
        "server_metrics": {"url": summary.server_metrics_url, "note": summary.server_metrics_note},
        "host_cpu_note": summary.host_cpu_note,
        "workloads": [_workload_json(r, summary.rules.get(r.workload, ()), stream_requests) for r in summary.workloads],
        "sweeps": [_sweep_json(s, summary.rules.get(s.sweep, ())) for s in summary.sweeps],
        "correctness": summary.correctness.to_json() if summary.correctness else None,
        "errors": summary.failures,
    }


def ratchet_note(improved: Sequence[str]) -> str:
    """What a passing run that beats its baseline beyond tolerance should lead to."""
    return (
        "; ".join(improved)
        + ": record it with --perf-update-baselines (better numbers need no reason), or a later regression "
        "hides under the old number"
    )


def markdown_summary(summary: RunSummary) -> str:
    lines = [f"## perfgate: {summary.profile_name}", ""]
    server = summary.server
    if server is not None:
        lines.append(f"Target: `{server.kind}` {server.model} ({server.version or 'unknown version'})")
        lines.append("")
    lines.append(render_markdown(rows(summary)))
    for res in summary.workloads:
        if host_bound := res.host_bound_summary():
            lines += ["", f"**{res.workload}**: {host_bound}"]
        if res.changes:
            lines += ["", f"**{res.workload}**: changed since the baseline: " + "; ".join(res.changes)]
        if res.improved:
            lines += ["", f"**{res.workload}**: {ratchet_note(res.improved)}"]
        if res.explain is not None:
            lines += ["", f"**{res.workload}** ({res.explain.excluded}):", "", "```", *res.explain.lines(), "```"]
    for name, err in summary.failures.items():
        lines.append(f"\n**{name}**: {err}")
    return "\n".join(lines) + "\n"


# A plot writer: (the document, the run's folder, where to record each file) -> None.
PlotWriter = Callable[[dict[str, Any], Path, Artefacts], None]


def write_documents(
    out_dir: Path, name: str, doc: dict[str, Any], md: str, step_summary: str | None, plots: PlotWriter
) -> Artefacts:
    """Write ``doc`` as ``<name>-<UTC time>.json`` in ``out_dir`` (created), and the run's other
    files (``md`` as summary.md, the plots) in the folder of the same name; append ``md`` to
    ``step_summary`` when given.

    The folder is made first, under a name no other run has (``-2``, ``-3``, ... appended when
    one has it), and each file is written atomically and exclusively (see :mod:`perfgate._files`);
    a file that cannot be written is a line in the returned :class:`Artefacts`, and the others are
    still attempted.
    """
    out = Artefacts()
    now = time.time()
    stem = f"{file_stem(name)}-{time.strftime('%Y%m%dT%H%M%S', time.gmtime(now))}.{int(now % 1 * 1e6):06d}Z"
    try:
        run_dir = reserve_dir(out_dir, stem)
    except OSError as e:
        out.failed.append(f"{out_dir / stem}: not created: {describe(e)}")
    else:
        # iterencode writes as it goes; json.dumps would first build the whole text. NaN and
        # Infinity are no JSON (perfgate compare refuses them): null, and never written.
        encoded = json.JSONEncoder(sort_keys=True, indent=1, allow_nan=False).iterencode(plain(doc))
        out.attempt(path_in(out_dir, f"{run_dir.name}.json"), lambda p: publish(p, itertools.chain(encoded, "\n")))
        out.attempt(run_dir / "summary.md", lambda p: publish(p, [md]))
        plots(doc, run_dir, out)
    if step_summary:
        # GitHub Actions names a regular file; a FIFO nobody reads would hang the run's end.
        out.attempt(
            Path(step_summary),
            lambda p: append_text(p, md),
            not_a_file="GITHUB_STEP_SUMMARY must name a regular file; the summary is in summary.md",
        )
    return out


def write_results(summary: RunSummary, out_dir: Path, *, step_summary: str | None = None) -> Artefacts:
    """Write results-<profile>-<time>.json and, in the folder of that name, summary.md (and PNG
    plots with the ``plots`` extra); see :func:`write_documents`."""
    from perfgate.report._plots import write_plots

    doc = results_document(summary, stream_requests=True)
    return write_documents(
        out_dir, f"results-{summary.profile_name}", doc, markdown_summary(summary), step_summary, write_plots
    )


# -- reading -------------------------------------------------------------------------------

_FROM = "pass files written by --perf-results"


@dataclass(frozen=True)
class ResultsWorkload:
    """What a results file says of one workload: the rules it was gated on, each repeat's
    numeric metric values and the boot it ran on (None: one boot, as in files written before
    boots were), the error that stopped it ("" if none), why the run was invalid, and the
    baseline fingerprint (None when the file has none)."""

    name: str
    rules: tuple[MetricRule, ...]
    repeats: tuple[dict[str, float], ...]
    error: str
    invalid_reasons: tuple[str, ...]
    fingerprint: dict[str, Any] | None
    boots: tuple[int, ...] | None = None


@dataclass(frozen=True)
class Results:
    """A results file as read back: its profile's name (None if it names none) and workloads by name."""

    path: Path
    profile: str | None
    workloads: dict[str, ResultsWorkload]
    # The server's provenance (launch command, versions, autotune), as the run wrote it.
    server: Mapping[str, Any] = field(default_factory=dict)


def read_results(path: Path) -> Results:
    """Read a results JSON file that :func:`write_results` wrote (schema :data:`RESULTS_SCHEMA`).

    PerfgateError with one line naming the file and what to pass instead for a missing file, a
    non-file, a file that is not JSON, an A/B's results, a results file of another schema
    version, or one whose workloads are malformed.
    """
    text = read_named(
        path,
        "results",
        PerfgateError,
        missing="write results with `pytest perf_tests --perf-results DIR`",
        not_a_file="pass a results-*.json file that --perf-results wrote",
    )
    try:
        doc = _json.loads(text)
    except JSONInputError as e:
        raise PerfgateError(f"results {path}: not a perfgate results JSON file: {e}; {_FROM}") from None
    if not isinstance(doc, dict) or not isinstance(doc.get("workloads"), list):
        raise PerfgateError(f"results {path}: not a perfgate results file (no 'workloads'); {_FROM}")
    if doc.get("kind") == "ab":
        raise PerfgateError(
            f"results {path}: the results of an A/B (perfgate ab), which judged B against A itself; {_FROM}"
        )
    version = doc.get("schema_version")
    if version != RESULTS_SCHEMA:
        raise PerfgateError(
            f"results {path}: schema_version {version!r}, and this perfgate reads results of schema "
            f"{RESULTS_SCHEMA}; compare files written by one perfgate version (rerun the older side with this one)"
        )
    workloads: dict[str, ResultsWorkload] = {}
    for entry in doc["workloads"]:
        wl = _workload(entry, path)
        workloads[wl.name] = wl
    profile = doc.get("profile")
    name = profile.get("name") if isinstance(profile, dict) else profile
    server = doc.get("server")
    return Results(
        path=path,
        profile=name if isinstance(name, str) else None,
        workloads=workloads,
        server=server if isinstance(server, dict) else {},
    )


def _workload(entry: Any, path: Path) -> ResultsWorkload:
    if (
        not isinstance(entry, dict)
        or not isinstance(entry.get("workload"), str)
        or not isinstance(entry.get("repeats"), list)
    ):
        raise PerfgateError(f"results {path}: a workload entry lacks 'workload' or 'repeats'; {_FROM}")
    name = entry["workload"]

    def malformed(what: str) -> PerfgateError:
        return PerfgateError(f"results {path}: workload {name!r}: {what}; {_FROM}")

    repeats, boots = [], []
    for i, rep in enumerate(entry["repeats"], start=1):
        values = rep.get("values") if isinstance(rep, dict) else None
        if not isinstance(values, dict):
            raise malformed(f"repeat {i} has no 'values' table")
        boot = rep.get("boot", 1)
        if not is_boot(boot):
            raise malformed(f"repeat {i}'s 'boot' is {boot!r}, not a boot number from 1 to {MAX_BOOTS}")
        boots.append(boot)
        # NaN was written as null: a value not measured.
        repeats.append(
            {
                str(k): float(v)
                for k, v in values.items()
                if isinstance(v, (int, float)) and not isinstance(v, bool) and math.isfinite(v)
            }
        )
    rules = entry.get("rules", [])
    if not isinstance(rules, list):
        raise malformed("'rules' is not a list")
    reasons = entry.get("invalid_reasons") or []
    fingerprint = entry.get("fingerprint")
    if not isinstance(reasons, list) or (fingerprint is not None and not isinstance(fingerprint, dict)):
        raise malformed("'invalid_reasons' is not a list or 'fingerprint' not a table")
    return ResultsWorkload(
        name=name,
        rules=tuple(_rule(r, malformed) for r in rules),
        repeats=tuple(repeats),
        error=str(entry.get("error") or ""),
        invalid_reasons=tuple(map(str, reasons)),
        fingerprint=fingerprint,
        boots=tuple(boots) if len(set(boots)) > 1 else None,
    )


_RULE_KEYS = {f.name for f in fields(MetricRule)}


def _rule(raw: Any, malformed: Callable[[str], PerfgateError]) -> MetricRule:
    def number(v: Any) -> bool:
        return v is None or (isinstance(v, (int, float)) and not isinstance(v, bool))

    if (
        not isinstance(raw, dict)
        or set(raw) - _RULE_KEYS
        or not isinstance(raw.get("metric"), str)
        or raw.get("direction") not in ("higher", "lower")
        or not all(number(raw.get(k)) for k in ("tolerance", "floor", "ceiling"))
    ):
        raise malformed(f"a rule is not a metric, a direction and numbers ({raw!r})")
    return MetricRule(**raw)
