"""The session's side of explain: run the slice after a workload's verdict, store or compare its table."""

from __future__ import annotations

import json
import time
from collections.abc import Callable

from perfgate._files import reserve_dir
from perfgate._names import file_stem, path_in
from perfgate.errors import BaselineError, PerfgateError
from perfgate.explain import TABLE_KIND, ExplainError, ExplainResult, compare, read_table, run_slice
from perfgate.load import LoadRun, Progress
from perfgate.profile import Workload
from perfgate.session._policy import GatePolicy
from perfgate.session._result import RepeatResult, WorkloadResult
from perfgate.session._stack import ServerStack


def explain_workload(
    stack: ServerStack, policy: GatePolicy, workload: Workload, result: WorkloadResult
) -> ExplainResult:
    """Profile an extra repeat of ``workload`` on ``stack``'s server; when recording, store its table
    with the baseline just recorded in ``policy``'s store; when gating, compare it with the stored one.
    Never raises: what fails is a note."""
    options = policy.options
    spec = policy.profile.explain
    server = stack.server()
    stamp = time.strftime("%Y%m%dT%H%M%SZ", time.gmtime())
    try:
        # Absolute: the server writes into it, from its own working directory.
        folder = reserve_dir(path_in(options.log_dir.absolute(), "explain"), f"{file_stem(workload.name)}-{stamp}")
    except OSError as e:
        return ExplainResult(note=f"no folder for the profile under {options.log_dir} ({e.strerror or e})")
    extra: list[RepeatResult] = []

    def run_repeat(on_progress: Callable[[Progress], None]) -> LoadRun:
        stack.repeat_fn(workload, extra, on_progress)()
        return extra[-1].load

    gpus = stack.hardware().gpu_count
    try:
        res = run_slice(
            run_repeat,
            base_url=server.base_url,
            spec=spec,
            folder=folder,
            # A CPU engine's torch has no CUDA activity to record.
            activities=["CPU", "GPU"] if gpus else ["CPU"],
            # /start_profile is an admin endpoint where the server guards them.
            headers=server.headers(admin=True),
        )
    except PerfgateError as e:
        return ExplainResult(note=f"the extra repeat failed: {e}")
    if extra:
        res.slice_metrics = extra[-1].flat_metrics()
    fingerprint = result.fingerprint
    if fingerprint is None or res.table is None or options.measure_only:
        return res
    store, profile = policy.store, policy.profile.name
    if options.update_baselines:
        if not result.recorded:
            res.notes.append("not stored as the reference profile: the baseline was not recorded")
            return res
        try:
            # NaN or Infinity would make the next run refuse the file: never written.
            text = json.dumps(res.table.to_dict(), indent=1, allow_nan=False) + "\n"
            path = store.save_sidecar(profile, workload.name, fingerprint, TABLE_KIND, text)
        except (BaselineError, ValueError) as e:
            res.notes.append(f"not stored as the reference profile: {e}")
            return res
        res.reference_path = str(path)
        res.notes.append("stored as the reference profile of the baseline")
        return res
    path = store.sidecar_path(profile, workload.name, fingerprint, TABLE_KIND)
    try:
        reference = read_table(path)
    except ExplainError as e:
        res.note = str(e)
        return res
    compare(res, reference, str(path) if reference is not None else "")
    return res
