#!/usr/bin/env bash
# perfgate end to end on a real NVIDIA GPU: `transformers serve` with a locally built 4.9 B model,
# gated by perf_tests/test_serving.py under profiles/h200-transformers-serve.toml.
#
#   benchmarks/gpu_e2e.sh [WORK_DIR]        (default WORK_DIR: .perfgate-cache/gpu-e2e)
#
# Steps, all inside one ~10-minute budget:
#   1. install carried wheels into a target directory (when PERFGATE_WHEELS is set);
#   2. build the model once (perfgate.testing, cached; initialised on the GPU: seconds, not minutes);
#   3. record:  pytest perf_tests --perf-update-baselines      -> baselines in WORK_DIR/baselines;
#   4. gate:    pytest perf_tests against those baselines      -> throughput/latency must pass;
#   5. regress: the same profile and baselines, with a regression injected that leaves the
#               fingerprint alone, so the gate compares against the recorded baseline and
#               test_throughput[prefill-c256] must FAIL with perfgate's message. By default the
#               regression is a GPU co-tenant: a bf16 matmul loop on the server's GPU for the whole
#               stage (a noisy neighbour; the H200 run showed this workload GPU-bound, 84 % busy).
#               E2E_SLOW_ARGS adds server flags outside the fingerprint instead or as well.
#   In steps 3 and 4 the light-c1 workload is the power-floor negative control: its test_gpu_power
#   must FAIL while prefill-c256 passes the same gpu_power_min_w floor.
# Exit status 0 only when every expectation held. The last stdout line is one JSON object.
#
# Environment:
#   PYTHON           interpreter with torch (CUDA), transformers, aiohttp, httpx, pytest, filelock,
#                    nvidia-ml-py, prometheus_client (default: python3)
#   PERFGATE_WHEELS  directory of wheels to install first (transformers serve's serving extras:
#                    fastapi, starlette, uvicorn, pydantic, openai, ...), with pip --no-index --no-deps
#   PERFGATE_SITE    where those wheels go (default: WORK_DIR/site); prepended to PYTHONPATH
#   E2E_DEADLINE_S   wall-clock budget of the whole script in seconds (default: 570)
#   E2E_NEIGHBOUR    1 (default) runs the GPU co-tenant during the regress stage; 0 does not
#   E2E_SKIP_GATE    1 skips step 4 (gate) and its expectations, to fit record and regress into a
#                    shorter budget: the regress stage needs only the record stage's baselines, and
#                    the record stage still holds the light-c1 power-floor negative control
#   E2E_SLOW_ARGS    server flags for the regress stage, passed through PERFGATE_TSERVE_EXTRA_ARGS
#                    (outside the fingerprint; default none). Measured on the H200 (2026-11-29):
#                    "--cb-max-batch-tokens 2048" is NOT a regression for this workload, it made
#                    output throughput 26.6 % higher than the profile's 8192.
set -uo pipefail
cd "$(dirname "$0")/.."

WORK=${1:-.perfgate-cache/gpu-e2e}
PY=${PYTHON:-python3}
PROFILE=profiles/h200-transformers-serve.toml
MODEL_LINK=.perfgate-cache/models/h200-llama-h4096-l24
MODEL_CACHE=${PERFGATE_MODEL_CACHE:-.perfgate-cache/models/cache}
DEADLINE_S=${E2E_DEADLINE_S:-570}
SLOW_ARGS=${E2E_SLOW_ARGS:-}
NEIGHBOUR=${E2E_NEIGHBOUR:-1}
SKIP_GATE=${E2E_SKIP_GATE:-0}
# Marks every process a stage starts (the server runs in its own session), so a stage stopped at
# its time limit leaves nothing holding the GPU for the next one.
RUN_ID="gpu-e2e-$$-$(date +%s)"
# Only the regress stage may carry the injected regression.
unset PERFGATE_TSERVE_EXTRA_ARGS

TAG=gpu_e2e
# shellcheck source=benchmarks/_gpu_stage.sh
source benchmarks/_gpu_stage.sh

if [ "$NEIGHBOUR" != 1 ] && [ -z "$SLOW_ARGS" ]; then
    say "no regression to inject: set E2E_NEIGHBOUR=1 or E2E_SLOW_ARGS"
    exit 2
fi

rm -rf "$WORK/record" "$WORK/gate" "$WORK/regress" "$WORK/baselines"
mkdir -p "$WORK" "$(dirname "$MODEL_LINK")" "$MODEL_CACHE"

if [ -n "${PERFGATE_WHEELS:-}" ]; then
    SITE=${PERFGATE_SITE:-$WORK/site}
    say "installing $(ls "$PERFGATE_WHEELS"/*.whl | wc -l) wheels from $PERFGATE_WHEELS into $SITE"
    "$PY" -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target "$SITE" "$PERFGATE_WHEELS"/*.whl \
        || { say "wheel install failed"; exit 2; }
    export PYTHONPATH="$(cd "$SITE" && pwd)${PYTHONPATH:+:$PYTHONPATH}"
fi

# An installed perfgate registers its plugin through its entry point; a source checkout needs -p.
PLUGIN=()
if ! "$PY" -c "import importlib.metadata as m; m.distribution('perfgate')" 2>/dev/null; then
    export PYTHONPATH="$PWD/src${PYTHONPATH:+:$PYTHONPATH}"
    PLUGIN=(-p perfgate.plugin)
fi

say "environment"
nvidia-smi --query-gpu=index,name,driver_version,power.limit,memory.total --format=csv,noheader || { say "no NVIDIA GPU"; exit 2; }
"$PY" -c "import sys, torch, transformers, fastapi, uvicorn, pydantic, openai, aiohttp, pynvml, perfgate
print('python', sys.version.split()[0], '| torch', torch.__version__, '| cuda', torch.cuda.is_available(), '| transformers', transformers.__version__, '| fastapi', fastapi.__version__, '| uvicorn', uvicorn.__version__, '| pydantic', pydantic.__version__, '| openai', openai.__version__, '| aiohttp', aiohttp.__version__)
try:
    import matplotlib; print('matplotlib', matplotlib.__version__, '(plots on)')
except ImportError:
    print('matplotlib missing (no plots)')" || { say "a needed package does not import"; exit 2; }

say "model: hidden 4096, 24 layers, 32 heads, FFN 11008, bf16 (cache $MODEL_CACHE)"
build_model "$MODEL_CACHE" "$MODEL_LINK" '{"hidden_size": 4096, "num_layers": 24, "num_heads": 32, "intermediate_size": 11008}' \
    || { say "model build failed"; exit 2; }

trap reap EXIT

PYTEST=("$PY" -m pytest perf_tests "${PLUGIN[@]}" -rA --perf-profile "$PROFILE" --perf-baselines "$WORK/baselines")

# A bf16 matmul loop on the server's GPU (index 0 in the profile), marked like a stage's processes
# so reap stops it with the stage.
start_neighbour() {
    say "regress: starting the GPU co-tenant (8192^3 bf16 matmuls in a loop on GPU 0)"
    CUDA_DEVICE_ORDER=PCI_BUS_ID CUDA_VISIBLE_DEVICES=0 PERFGATE_E2E_RUN="$RUN_ID" "$PY" - <<'EOF' &
import sys, torch
if not torch.cuda.is_available():
    sys.exit("[gpu_e2e] no CUDA device: no GPU co-tenant")
a = torch.randn(8192, 8192, device="cuda", dtype=torch.bfloat16)
b = torch.randn_like(a)
while True:
    for _ in range(20):
        torch.mm(a, b)
    torch.cuda.synchronize()
EOF
}

run_stage record 200 "${PYTEST[@]}" --perf-update-baselines
if [ "$SKIP_GATE" = 1 ]; then
    say "gate: skipped (E2E_SKIP_GATE=1)"
else
    run_stage gate 170 "${PYTEST[@]}"
fi
[ "$NEIGHBOUR" = 1 ] && start_neighbour
[ -n "$SLOW_ARGS" ] && export PERFGATE_TSERVE_EXTRA_ARGS="$SLOW_ARGS"
run_stage regress 220 "${PYTEST[@]}" -k prefill-c256
unset PERFGATE_TSERVE_EXTRA_ARGS

say "checking expectations"
EXPECT=$("$PY" - "$SKIP_GATE" <<'EOF'
import json, sys
both = {"test_run_is_valid[prefill-c256]": "passed", "test_run_is_valid[light-c1]": "passed",
        "test_throughput[prefill-c256]": "passed", "test_latency[prefill-c256]": "passed",
        "test_gpu_power[prefill-c256]": "passed", "test_gpu_power[light-c1]": "failure"}
expect = {
    "record": both,
    "gate": both | {"test_throughput[light-c1]": "passed", "test_latency[light-c1]": "passed"},
    "regress": {"test_throughput[prefill-c256]": "failure"},
    "_messages": {"regress": {"test_throughput[prefill-c256]": "throughput"}},
}
if sys.argv[1] == "1":
    del expect["gate"]
print(json.dumps(expect))
EOF
)
CONTEXT=$("$PY" -c "import json, sys; print(json.dumps({'script': 'gpu_e2e', 'regression': {'server_args': sys.argv[1], 'gpu_neighbour': sys.argv[2] == '1'}, 'gate_skipped': sys.argv[3] == '1'}))" "$SLOW_ARGS" "$NEIGHBOUR" "$SKIP_GATE")
"$PY" benchmarks/_gpu_report.py "$WORK" "$EXPECT" "$CONTEXT"
