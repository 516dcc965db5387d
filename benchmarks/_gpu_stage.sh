# Shared by the GPU end-to-end scripts (gpu_e2e.sh, gpu_sglang.sh); source it after setting
#   TAG (log prefix), PY (interpreter), WORK (stage folders), DEADLINE_S (whole budget, s) and
#   RUN_ID (marks every process a stage starts, so a stage stopped at its time limit leaves
#   nothing holding the GPU for the next one: the server runs in its own session).

say() { echo "[$TAG $(date -u +%H:%M:%S) +${SECONDS}s] $*"; }

# build_model CACHE LINK JSON: perfgate.testing's random Llama with the parameters in JSON (its
# "size" preset "gpu" unless JSON names one), initialised on the GPU (seconds, not minutes on a few CPU cores), cached in
# CACHE and linked at LINK (the profile's model_path).
build_model() {
    local cache=$1 link=$2 params=$3 dir
    mkdir -p "$cache" "$(dirname "$link")"
    dir=$("$PY" - "$cache" "$params" <<'PYEOF'
import contextlib, json, sys, time
import torch
from perfgate.testing import ensure_tiny_model
t0 = time.monotonic()
where = torch.device("cuda") if torch.cuda.is_available() else contextlib.nullcontext()
with where:
    path = ensure_tiny_model(sys.argv[1], **{"size": "gpu", **json.loads(sys.argv[2])})
print(f"model ready in {time.monotonic() - t0:.1f} s: {path}", file=sys.stderr)
print(path.resolve())
PYEOF
    ) || return 1
    ln -sfn "$dir" "$link"
    du -sh "$dir"
}

reap() {
    local p
    for p in /proc/[0-9]*; do
        if { tr '\0' '\n' <"$p/environ"; } 2>/dev/null | grep -qx "PERFGATE_E2E_RUN=$RUN_ID"; then
            # On stderr: stdout's last line is the report, and the EXIT trap reaps after it.
            say "stopping leftover process ${p#/proc/}: $(tr '\0' ' ' <"$p/cmdline" | cut -c1-120)" >&2
            kill -9 "${p#/proc/}" 2>/dev/null
        fi
    done
}

# run_stage NAME MAX_S COMMAND...: one stage (COMMAND gets --perf-results WORK/NAME and --junitxml
# WORK/NAME/junit.xml appended), bounded by what is left of the budget, its processes reaped after.
run_stage() {
    local name=$1 max_s=$2 left
    shift 2
    left=$((DEADLINE_S - SECONDS - 10))
    [ "$left" -lt "$max_s" ] && max_s=$left
    if [ "$max_s" -lt 60 ]; then
        say "$name: skipped, only ${left}s of the budget left"
        return
    fi
    mkdir -p "$WORK/$name"
    say "$name: (at most ${max_s}s) $*"
    # SIGINT first: pytest then tears the server down itself.
    timeout -s INT -k 30 "$max_s" env PERFGATE_E2E_RUN="$RUN_ID" PYTHONUNBUFFERED=1 "$@" \
        --perf-results "$WORK/$name" --junitxml "$WORK/$name/junit.xml"
    say "$name: exit status $?"
    reap
}
