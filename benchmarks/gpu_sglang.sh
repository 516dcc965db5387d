#!/usr/bin/env bash
# perfgate end to end on a real NVIDIA GPU with the real PyPI SGLang (kind = "sglang"): a locally
# built random Llama (680 M by default) gated by perf_tests/test_serving.py under a profile
# (profiles/h200-sglang.toml by default; profiles/h200-sglang-gpu-bound.toml is the 7.8 B one).
#
#   GPU_SGLANG_BUNDLE=/var/tmp/sgb benchmarks/gpu_sglang.sh [WORK_DIR]   (default WORK_DIR: .perfgate-cache/gpu-sglang)
#
# GPU_SGLANG_BUNDLE is a joined bundle of python -m perfgate.testing.sglang_bundle (its chunk 1's join.sh
# unpacks it and checks the imports); leave it unset where SGLang is installed already.
# Steps, all inside one ~10-minute budget:
#   1. build the model on the GPU (perfgate.testing, cached): GPU_SGLANG_MODEL_PARAMS;
#   2. record:  pytest perf_tests --perf-update-baselines      -> baselines in WORK_DIR/baselines;
#   3. gate:    pytest perf_tests against those baselines      -> throughput/latency must pass;
#   4. regress: a slower server (GPU_SGLANG_SLOW_ARGS, default --max-running-requests 32) started by
#               perfgate's own start_server and attached with --perf-base-url (one boot: an attached
#               server cannot be rebooted), so the fingerprint
#               is the profile's: test_throughput[GPU_SGLANG_WORKLOAD] must FAIL with perfgate's
#               message. (A GPU co-tenant cannot be the regression here: perfgate rightly refuses
#               to launch on a GPU another process holds.)
#   In steps 2 and 3 every workload of the profile must be valid and GPU_SGLANG_WORKLOAD pass its
#   gpu_power_min_w floor; where the profile has them, light-c1 is the power-floor negative control
#   (its test_gpu_power must FAIL) and oai-c1024-in128-out64 is 1024 streams at once through
#   /v1/completions, recorded in step 2 and gated in step 3. With [gate] boots = N each of steps
#   2 and 3 boots the server N times per workload (docs/verdicts.md).
# Exit status 0 only when every expectation held; 2 when the host cannot run it. The last stdout
# line is one JSON object (benchmarks/_gpu_report.py).
#
# Environment (GPU_SGLANG_*: SGLang itself reads, and warns about, every SGL_* variable):
#   PYTHON         interpreter with torch (CUDA), perfgate's dependencies and SGLang (default: python3)
#   GPU_SGLANG_BUNDLE     joined bundle directory (holds env.sh and site/), sourced first
#   GPU_SGLANG_PROFILE    profile (default: profiles/h200-sglang.toml); its workload names are the expectations'
#   GPU_SGLANG_MODEL      1 (default) builds the model and links it at the profile's model_path; 0 does not
#   GPU_SGLANG_MODEL_PARAMS JSON of perfgate.testing.ensure_tiny_model's arguments (default: the 680 M
#                  model, {"size": "gpu", "hidden_size": 2048, "num_layers": 16, "num_heads": 16,
#                  "intermediate_size": 5632}; the 7.8 B one: {"size": "gpu-8b"})
#   GPU_SGLANG_WORKLOAD   the workload the regress stage, explain, noise and the power expectation use
#                  (default: gen-c256-in512-out128)
#   GPU_SGLANG_STAGES     which of record, gate, regress to run (default: "record gate regress"); a later
#                  call on the same machine and WORK_DIR runs "gate regress" against the baselines an
#                  earlier call recorded (a profile with boots = 3 does not fit one 10-minute call)
#   GPU_SGLANG_DEADLINE_S wall-clock budget of the whole script in seconds (default: 570)
#   GPU_SGLANG_SKIP_GATE  1 skips step 3 (gate) and its expectations (as GPU_SGLANG_STAGES="record regress")
#   GPU_SGLANG_SLOW_ARGS  server flags of the regress stage's slower server (default: --max-running-requests 32)
#   GPU_SGLANG_EXPLAIN    1 adds --perf-explain to steps 2-4 and runs gen-c256 alone in each (an explain slice
#                  is an extra repeat per workload: all three workloads do not fit one call): record stores
#                  its reference profile, gate diffs the unchanged server against it, regress the slower
#                  one (issue #21, item 6); the report carries each stage's explain table and diff in brief
#   GPU_SGLANG_RECORD_S   time limit of the record stage in seconds (default 240; a fresh machine's first
#                  boot alone took 143 s once and more than 140 s twice: cold Triton and CUDA-graph caches)
#   GPU_SGLANG_GATE_S, GPU_SGLANG_REGRESS_S  time limits of the gate and regress stages (default 220, 240)
#   GPU_SGLANG_NOISE_BOOTS N > 0: instead of steps 2-4, boot the unchanged profile N times, one repeat of
#                  gen-c256 each (one boot per stage, whatever the profile's [gate] boots) (stages boot-1 ... boot-N, each recording its own baselines), with
#                  the GPU's clocks, power and temperature sampled every 0.5 s into WORK/gpu-clocks.csv
#                  and the server's and client's processes' CPU every second into WORK/top.log:
#                  the raw material of the boot-to-boot noise study (issue #20, item 3); then
#                  benchmarks/boot_spread.py prints the spread over the boots (WORK/boot-spread.json)
#   GPU_SGLANG_NOISE_REPEATS repeats per noise boot (default 1; 2 also shows the repeat-to-repeat spread)
#   GPU_SGLANG_BOOT_S     time limit of one noise boot's stage in seconds (default 150); a noise boot is
#                  not started with less of the budget left (a boot cut short measures nothing)
#   GPU_SGLANG_NOISE_AFFINITY CPUS (noise mode): the pinned-vs-unpinned study (issue #29, item 3): each
#                  boot number runs twice, the profile as it is, then with [server] cpu_affinity = CPUS
#                  (taskset -c syntax), so the two sides alternate on one machine; their boots go to
#                  WORK/unpinned/boot-N and WORK/pinned/boot-N, each side with its own boot-spread.json
#   GPU_SGLANG_NOISE_FIRST which side each boot number starts with: unpinned (default) or pinned (a call
#                  that fits an odd number of boots, the next call starting with the other side, balances)
set -uo pipefail
cd "$(dirname "$0")/.."

WORK=${1:-.perfgate-cache/gpu-sglang}
PY=${PYTHON:-python3}
PROFILE=${GPU_SGLANG_PROFILE:-profiles/h200-sglang.toml}
BUILD_MODEL=${GPU_SGLANG_MODEL:-1}
DEADLINE_S=${GPU_SGLANG_DEADLINE_S:-570}
SKIP_GATE=${GPU_SGLANG_SKIP_GATE:-0}
STAGES=" ${GPU_SGLANG_STAGES:-record gate regress} "
[ "$SKIP_GATE" = 1 ] && STAGES=${STAGES// gate / }
MODEL_PARAMS=${GPU_SGLANG_MODEL_PARAMS:-'{"size": "gpu", "hidden_size": 2048, "num_layers": 16, "num_heads": 16, "intermediate_size": 5632}'}
SLOW_ARGS=${GPU_SGLANG_SLOW_ARGS---max-running-requests 32}
MODEL_CACHE=${PERFGATE_MODEL_CACHE:-.perfgate-cache/models/cache}
C256=${GPU_SGLANG_WORKLOAD:-gen-c256-in512-out128}
# Marks every process a stage starts (the server runs in its own session), so a stage stopped at
# its time limit leaves nothing holding the GPU for the next one.
RUN_ID="gpu-sglang-$$-$(date +%s)"

TAG=gpu_sglang
# shellcheck source=benchmarks/_gpu_stage.sh
source benchmarks/_gpu_stage.sh

[ -f "$PROFILE" ] || { say "no profile $PROFILE (GPU_SGLANG_PROFILE)"; exit 2; }
for stage in $STAGES; do
    case $stage in
        record | gate | regress) ;;
        *) say "GPU_SGLANG_STAGES: unknown stage '$stage' (record, gate, regress)"; exit 2 ;;
    esac
done
case ${GPU_SGLANG_NOISE_FIRST:-unpinned} in
    unpinned | pinned) ;;
    *) say "GPU_SGLANG_NOISE_FIRST: unknown side '${GPU_SGLANG_NOISE_FIRST}' (unpinned, pinned)"; exit 2 ;;
esac
if [ -z "$SLOW_ARGS" ]; then
    say "GPU_SGLANG_SLOW_ARGS is empty: the regress stage needs server flags that make it slower"
    exit 2
fi
if [ -n "${GPU_SGLANG_BUNDLE:-}" ]; then
    if [ ! -f "$GPU_SGLANG_BUNDLE/env.sh" ] || [ ! -d "$GPU_SGLANG_BUNDLE/site" ]; then
        say "GPU_SGLANG_BUNDLE=$GPU_SGLANG_BUNDLE holds no env.sh and site/: run the bundle's join.sh there first"
        exit 2
    fi
    # shellcheck disable=SC1091
    source "$GPU_SGLANG_BUNDLE/env.sh"
fi

# Only what this call runs is cleared: a later call gates against an earlier call's baselines.
for stage in $STAGES; do rm -rf "${WORK:?}/$stage"; done
[[ $STAGES == *" record "* ]] && rm -rf "$WORK/baselines"
mkdir -p "$WORK"

# An installed perfgate registers its plugin through its entry point; a source checkout needs -p.
PLUGIN=()
if ! "$PY" -c "import importlib.metadata as m; m.distribution('perfgate')" 2>/dev/null; then
    export PYTHONPATH="$PWD/src${PYTHONPATH:+:$PYTHONPATH}"
    PLUGIN=(-p perfgate.plugin)
fi

say "environment"
if [ "$BUILD_MODEL" = 1 ]; then
    nvidia-smi --query-gpu=index,name,driver_version,power.limit,memory.total,clocks.sm,clocks.max.sm --format=csv,noheader \
        || { say "no NVIDIA GPU"; exit 2; }
fi
"$PY" - "$PROFILE" "$C256" <<'EOF' || { say "a needed package does not import, the profile does not load, or GPU_SGLANG_WORKLOAD is not its workload"; exit 2; }
import importlib.metadata as md, sys
from perfgate.profile import load_profile
profile = load_profile(sys.argv[1])
names = [w.name for w in profile.workloads]
if sys.argv[2] not in names:
    sys.exit(f"GPU_SGLANG_WORKLOAD {sys.argv[2]!r} is not a workload of {sys.argv[1]} ({', '.join(names)})")
kind = profile.server.kind
print("profile", profile.name, "| server", kind, "| workloads", ", ".join(w.name for w in profile.workloads))
if kind == "sglang":
    import torch, transformers, sgl_kernel, sglang.srt.server_args
    print("python", sys.version.split()[0], "| torch", torch.__version__, "| cuda", torch.cuda.is_available(),
          "| sglang", md.version("sglang"), "| sglang-kernel", md.version("sglang-kernel"),
          "| transformers", transformers.__version__, "| tokenizers", md.version("tokenizers"))
EOF

if [ "$BUILD_MODEL" = 1 ]; then
    MODEL_LINK=$("$PY" -c "import sys; from perfgate.profile import load_profile; print(load_profile(sys.argv[1]).server.model_path)" "$PROFILE")
    say "model: $MODEL_PARAMS (cache $MODEL_CACHE) -> $MODEL_LINK"
    build_model "$MODEL_CACHE" "$MODEL_LINK" "$MODEL_PARAMS" || { say "model build failed"; exit 2; }
fi

trap reap EXIT

PYTEST=("$PY" -m pytest perf_tests "${PLUGIN[@]}" -rA --perf-profile "$PROFILE" --perf-baselines "$WORK/baselines")
EXPLAIN=${GPU_SGLANG_EXPLAIN:-0}
if [ "$EXPLAIN" = 1 ]; then
    PYTEST+=(--perf-explain -k "$C256")
fi

NOISE_BOOTS=${GPU_SGLANG_NOISE_BOOTS:-0}
if [ "$NOISE_BOOTS" -gt 0 ] 2>/dev/null; then
    rm -rf "$WORK"/boot-*
    # Sides: the profile alone (boots in WORK/boot-N), or unpinned and pinned (WORK/SIDE/boot-N).
    SIDES=(.)
    AFFINITY=${GPU_SGLANG_NOISE_AFFINITY:-}
    if [ -n "$AFFINITY" ]; then
        SIDES=(unpinned pinned)
        [ "${GPU_SGLANG_NOISE_FIRST:-unpinned}" = pinned ] && SIDES=(pinned unpinned)
        rm -rf "$WORK"/unpinned "$WORK"/pinned
        "$PY" - "$PROFILE" "$AFFINITY" "$WORK/pinned.toml" <<'EOF' || { say "cannot write the pinned profile"; exit 2; }
import sys
from pathlib import Path
from perfgate.profile import load_profile
source, cpus, out = sys.argv[1:]
if load_profile(source).server.cpu_affinity:
    sys.exit(f"{source} pins its server already ([server] cpu_affinity): its unpinned side would not be")
# The key goes first in [server]: the table's other keys and sub-tables stay as they are.
lines = Path(source).read_text().splitlines(keepends=True)
at = next(i for i, line in enumerate(lines) if line.strip() == "[server]") + 1
lines.insert(at, f"cpu_affinity = {cpus!r}\n")
Path(out).write_text("".join(lines))
print("pinned profile:", out, "| server CPUs", load_profile(out).server.cpu_affinity)
EOF
    fi
    nvidia-smi --query-gpu=timestamp,clocks.sm,clocks.mem,power.draw,temperature.gpu,utilization.gpu,clocks_throttle_reasons.active \
        --format=csv -lms 500 >"$WORK/gpu-clocks.csv" 2>&1 &
    CLOCKS_PID=$!
    # The host side of the server (tokenizer manager, scheduler, detokenizer) and the client, CPU % per
    # process every second: the leading suspect of the spread is CPU time the server's processes get.
    top -b -d 1 -c -w 300 2>/dev/null | grep --line-buffered -E '^top -|sglang|pytest|perfgate' >"$WORK/top.log" &
    TOP_PID=$!
    trap 'kill "$CLOCKS_PID" "$TOP_PID" 2>/dev/null; reap' EXIT
    boot_s=${GPU_SGLANG_BOOT_S:-150}
    expect="{"
    for i in $(seq 1 "$NOISE_BOOTS"); do
        for side in "${SIDES[@]}"; do
            stage=boot-$i
            [ "$side" != . ] && stage=$side/boot-$i
            if [ $((DEADLINE_S - SECONDS - 10)) -lt "$boot_s" ]; then
                say "$stage: not started, less than GPU_SGLANG_BOOT_S=${boot_s}s of the budget left"
                break 2
            fi
            profile=$PROFILE
            [ "$side" = pinned ] && profile=$WORK/pinned.toml
            run_stage "$stage" "$boot_s" "$PY" -m pytest perf_tests "${PLUGIN[@]}" -rA --perf-profile "$profile" \
                --perf-baselines "$WORK/$stage/baselines" --perf-update-baselines \
                --perf-boots=1 --perf-repeats="${GPU_SGLANG_NOISE_REPEATS:-1}" -k "$C256"
            expect+="\"$stage\": {\"test_run_is_valid[$C256]\": \"passed\"},"
        done
    done
    kill "$CLOCKS_PID" "$TOP_PID" 2>/dev/null
    for side in "${SIDES[@]}"; do
        [ "$side" != . ] && say "$side boots:"
        "$PY" benchmarks/boot_spread.py "$WORK/$side" --workload "$C256" | tee "$WORK/$side/boot-spread.txt"
        tail -n 1 "$WORK/$side/boot-spread.txt" >"$WORK/$side/boot-spread.json"
    done
    CONTEXT=$("$PY" -c "import json, sys; print(json.dumps({'script': 'gpu_sglang noise', 'profile': sys.argv[1], 'boots': int(sys.argv[2]), 'pinned_cpus': sys.argv[4] or None, 'wall_s': int(sys.argv[3])}))" "$PROFILE" "$NOISE_BOOTS" "$SECONDS" "$AFFINITY")
    "$PY" benchmarks/_gpu_report.py "$WORK" "${expect%,}}" "$CONTEXT"
    exit $?
fi

if [[ $STAGES == *" record "* ]]; then
    run_stage record "${GPU_SGLANG_RECORD_S:-240}" "${PYTEST[@]}" --perf-update-baselines
fi
if [[ $STAGES == *" gate "* ]]; then
    run_stage gate "${GPU_SGLANG_GATE_S:-220}" "${PYTEST[@]}"
fi
# The slower server: the profile's own server with GPU_SGLANG_SLOW_ARGS appended, booted by perfgate's
# start_server (its readiness, logs and teardown), then the gate attached to it.
if [[ $STAGES == *" regress "* ]]; then
run_stage regress "${GPU_SGLANG_REGRESS_S:-240}" "$PY" - "$PROFILE" "$SLOW_ARGS" "$WORK/regress/server" "$C256" "${PYTEST[@]}" <<'EOF'
import shlex, subprocess, sys
from contextlib import ExitStack
from dataclasses import replace
from pathlib import Path
from perfgate.profile import load_profile
from perfgate.server import start_server

profile_path, slow_args, log_dir, workload, *pytest = sys.argv[1:]
profile = load_profile(profile_path)
spec = replace(profile.server, args=[*profile.server.args, *shlex.split(slow_args)])
with ExitStack() as stack:
    server = start_server(spec, log_dir=Path(log_dir), stack=stack)
    print(f"[gpu_sglang] slower server ({slow_args}) ready in {server.boot_s:.1f} s at {server.base_url}", flush=True)
    # One boot: perfgate cannot reboot a server it attached to (the baseline's boots still count).
    code = subprocess.call([*pytest, f"--perf-base-url={server.base_url}", "--perf-boots=1", "-k", workload])
sys.exit(code)
EOF
fi

say "checking expectations"
EXPECT=$("$PY" - "$STAGES" "$C256" "$EXPLAIN" "$PROFILE" <<'EOF'
import json, sys
from perfgate.profile import load_profile
stages, c256, only_c256 = sys.argv[1].split(), sys.argv[2], sys.argv[3] == "1"
# GPU_SGLANG_WORKLOAD was found among them before anything ran.
names = [w.name for w in load_profile(sys.argv[4]).workloads]
workloads = [c256] if only_c256 else names
both = {f"test_run_is_valid[{w}]": "passed" for w in workloads}
both |= {f"test_gpu_power[{c256}]": "passed"}
if "light-c1" in workloads:
    both["test_gpu_power[light-c1]"] = "failure"
gated = {f"test_{t}[{w}]": "passed" for t in ("throughput", "latency") for w in workloads if w != "light-c1"}
expect = {
    "record": both,
    "gate": both | gated,
    "regress": {f"test_throughput[{c256}]": "failure"},
}
expect = {stage: tests for stage, tests in expect.items() if stage in stages}
if "regress" in stages:
    expect["_messages"] = {"regress": {f"test_throughput[{c256}]": "output_throughput"}}
print(json.dumps(expect))
EOF
) || { say "cannot check expectations"; exit 2; }
CONTEXT=$("$PY" -c "import json, sys; print(json.dumps({'script': 'gpu_sglang', 'profile': sys.argv[1], 'regression': {'server_args': sys.argv[2], 'attached': True}, 'stages_run': sys.argv[3].split(), 'explain': sys.argv[5] == '1', 'wall_s': int(sys.argv[4])}))" "$PROFILE" "$SLOW_ARGS" "$STAGES" "$SECONDS" "$EXPLAIN")
"$PY" benchmarks/_gpu_report.py "$WORK" "$EXPECT" "$CONTEXT"
