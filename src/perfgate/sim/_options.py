"""Command line of ``python -m perfgate.sim``.

Every option is kebab-case because the launcher forwards a profile's ``[server.sim]`` table
(snake_case keys) as ``--key-with-dashes value`` (:func:`option_text`); booleans arrive as
``--flag true|false``. :func:`sim_options` exposes the same declarations so a profile's table is
checked when it loads, not when the simulator boots. Nothing here imports the HTTP server.
"""

from __future__ import annotations

import argparse
import math
import os
import random
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field, fields
from functools import cache
from pathlib import Path

from perfgate._limits import COUNT_MAX, FACTOR_MAX, LENGTH_MAX, SECONDS_MAX, SEED_MAX, TOKEN_ID_MAX, VALUE_MAX
from perfgate.sim._engine import SimConfig
from perfgate.sim._kernels import SlowKernel, slow_kernel_from_env
from perfgate.sim._telemetry_faults import TelemetryFaults, telemetry_faults_from_env

SLOWDOWN_ENV = "PERFGATE_SIM_SLOWDOWN"
# A GPU host's boot-to-boot speed (docs/gpu-noise.md): each boot's speed factor is drawn from
# [1 - x, 1 + x], afresh at every boot; the seed file makes the draws repeatable for tests.
BOOT_EFFECT_ENV = "PERFGATE_SIM_BOOT_EFFECT"
BOOT_SEED_FILE_ENV = "PERFGATE_SIM_BOOT_SEED_FILE"
# The version the simulator reports as its own ("" = its real one): lets a test play two
# software stacks (perfgate ab --candidate-python with a wrapper interpreter that sets it).
VERSION_ENV = "PERFGATE_SIM_VERSION"
# A regression injected without touching the command line (and so the baseline's fingerprint),
# as an upgrade that broke the prefix cache would be.
NO_CACHE_ENV = "PERFGATE_SIM_DISABLE_RADIX_CACHE"
# Wrong models for the correctness guard, also without touching the fingerprint (sim._model).
CORRUPT_RATE_ENV = "PERFGATE_SIM_CORRUPT_RATE"
NAN_LOGPROBS_ENV = "PERFGATE_SIM_NAN_LOGPROBS"
CORRUPT_ABOVE_BATCH_ENV = "PERFGATE_SIM_CORRUPT_ABOVE_BATCH"
# The load's answers (not the probe's, which ask for logprobs) rewritten to one token, as a proxy
# in front of the server could (issue 34): only a check of the load's own answers sees it.
LOAD_ONE_TOKEN_ENV = "PERFGATE_SIM_LOAD_ONE_TOKEN"
# Answers that lack what the probe compares (a lying server or proxy): /generate's logprob answers
# cut to N output tokens, or without output_top_logprobs.
CUT_ANSWERS_ENV = "PERFGATE_SIM_CUT_ANSWERS"
NO_TOP_LOGPROBS_ENV = "PERFGATE_SIM_NO_TOP_LOGPROBS"
_TRUE = {"true", "1", "yes", "on"}
_FALSE = {"false", "0", "no", "off"}
# Passed by the launcher itself: a [server.sim] value would override them and the launcher would
# wait on the wrong address.
LAUNCHER_SETS = ("host", "port")


@dataclass(frozen=True)
class SimOptions:
    """Everything the command line sets; field names are the options in snake_case."""

    host: str
    port: int
    model_path: str
    served_model_name: str
    vocab_size: int
    gpus: int
    gpu_name: str
    power_limit_w: float
    idle_power_w: float
    full_power_w: float
    max_running_requests: int
    chunked_prefill_size: int
    max_total_tokens: int
    step_fixed_ms: float
    step_per_request_ms: float
    step_per_prefill_token_ms: float
    noise: float
    drift: float
    seed: int
    time_scale: float
    stream_interval: int
    startup_delay_s: float
    zero_cost: bool
    tape_answers: bool
    spin_process: bool
    dcgm_names: str
    fail_at_startup: bool
    hang_at_startup: bool
    crash_after_requests: int
    crash_on_prompt_logprobs: bool
    stall_after_requests: int
    stall_s: float
    http_error_rate: float
    error_chunk_rate: float
    truncate_rate: float
    short_rate: float
    idle_gpus: int
    disable_radix_cache: bool
    prefix_cache_tokens: int
    slowdown: float
    version: str = ""
    corrupt_rate: float = 0.0
    corrupt_above_batch: int = 0
    nan_logprobs: bool = False
    load_one_token: bool = False
    cut_answers: int | None = None
    no_top_logprobs: bool = False
    slow_kernel: SlowKernel = field(default_factory=SlowKernel)
    telemetry_faults: TelemetryFaults = field(default_factory=TelemetryFaults)

    def engine_config(self) -> SimConfig:
        """The performance-model part of the options."""
        names = {f.name for f in fields(SimConfig)}
        return SimConfig(**{name: getattr(self, name) for name in names})

    def as_dict(self) -> dict[str, object]:
        """JSON-able: the slowed kernel as PERFGATE_SIM_SLOW_KERNEL writes it ("" for none)."""
        out = {f.name: getattr(self, f.name) for f in fields(self)}
        slow = self.slow_kernel
        out["slow_kernel"] = f"{slow.name}:{slow.factor:g}" if slow.name else ""
        faults = self.telemetry_faults
        out["telemetry_faults"] = {"dcgm": faults.dcgm, "metrics": faults.metrics}
        return out


class _Type:
    """An argparse ``type`` that says what it expects: ``convert`` raises ValueError for bad text."""

    def __init__(self, expected: str, convert: Callable[[str], object]) -> None:
        self.expected = expected
        self._convert = convert

    def __call__(self, text: str) -> object:
        try:
            return self._convert(text)
        except ValueError:
            raise argparse.ArgumentTypeError(f"expected {self.expected}, got {text!r}") from None


def _parse_bool(text: str) -> bool:
    lowered = text.strip().lower()
    if lowered in _TRUE:
        return True
    if lowered in _FALSE:
        return False
    raise ValueError(text)


_bool = _Type("true or false", _parse_bool)


def _finite(low: float, high: float, *, open_low: bool = False) -> _Type:
    """A number from ``low`` to ``high``: every option has both bounds (see perfgate._limits)."""

    def parse(text: str) -> float:
        value = float(text)
        below = value <= low if open_low else value < low
        if not math.isfinite(value) or below or value > high:
            raise ValueError(text)
        return value

    bound = f"> {low}" if open_low else f">= {low}"
    return _Type(f"a number {bound} and <= {high}", parse)


def _int_at_least(low: int, high: int = LENGTH_MAX) -> _Type:
    def parse(text: str) -> int:
        value = int(text)
        if not low <= value <= high:
            raise ValueError(text)
        return value

    return _Type(f"an integer from {low} to {high:,}", parse)


# A step's cost, in milliseconds: a day at most.
_STEP_MS_MAX = SECONDS_MAX * 1e3


def build_parser() -> argparse.ArgumentParser:
    defaults = SimConfig()
    p = argparse.ArgumentParser(
        prog="python -m perfgate.sim",
        description="An SGLang-compatible LLM serving simulator (perfgate).",
        allow_abbrev=False,
        formatter_class=argparse.ArgumentDefaultsHelpFormatter,
    )

    def flag(name: str, help_text: str | None = None) -> None:
        # "--flag", "--flag true" and "--flag false" all work: the launcher sends values.
        p.add_argument(name, type=_bool, nargs="?", const=True, default=False, metavar="true|false", help=help_text)

    fraction = _finite(0.0, 1.0)
    p.add_argument("--host", default="127.0.0.1")
    p.add_argument("--port", type=_int_at_least(0, 65535), default=30000)
    p.add_argument("--model-path", default="sim/GLM-5-NVFP4")
    p.add_argument("--served-model-name", default="", help="defaults to --model-path")
    p.add_argument("--vocab-size", type=_int_at_least(2, TOKEN_ID_MAX), default=151552)
    p.add_argument("--gpus", type=_int_at_least(1), default=8, help="simulated GPUs (tp size)")
    p.add_argument("--gpu-name", default="NVIDIA RTX PRO 6000 Blackwell Server Edition")
    p.add_argument("--power-limit-w", type=_finite(0.0, VALUE_MAX, open_low=True), default=600.0)
    p.add_argument("--idle-power-w", type=_finite(0.0, VALUE_MAX), default=87.0)
    p.add_argument("--full-power-w", type=_finite(0.0, VALUE_MAX), default=250.0, help="power at 100%% busy")
    p.add_argument("--max-running-requests", type=_int_at_least(1), default=defaults.max_running_requests)
    p.add_argument("--chunked-prefill-size", type=_int_at_least(1), default=defaults.chunked_prefill_size)
    p.add_argument(
        "--max-total-tokens",
        type=_int_at_least(1),
        default=defaults.max_total_tokens,
        help="KV-cache pool in tokens; admission reserves prompt + output tokens",
    )
    p.add_argument("--step-fixed-ms", type=_finite(0.0, _STEP_MS_MAX), default=defaults.step_fixed_ms)
    p.add_argument("--step-per-request-ms", type=_finite(0.0, _STEP_MS_MAX), default=defaults.step_per_request_ms)
    p.add_argument(
        "--step-per-prefill-token-ms", type=_finite(0.0, _STEP_MS_MAX), default=defaults.step_per_prefill_token_ms
    )
    noise, drift = defaults.noise, defaults.drift
    p.add_argument("--noise", type=_finite(0.0, FACTOR_MAX), default=noise, help="iid per-step jitter (rel. std)")
    p.add_argument("--drift", type=_finite(0.0, FACTOR_MAX), default=drift, help="slow AR(1) speed factor (rel. std)")
    p.add_argument("--seed", type=_int_at_least(0, SEED_MAX), default=defaults.seed)
    p.add_argument("--time-scale", type=_finite(0.0, FACTOR_MAX, open_low=True), default=defaults.time_scale)
    p.add_argument("--stream-interval", type=_int_at_least(1), default=1)
    p.add_argument("--startup-delay-s", type=_finite(0.0, SECONDS_MAX), default=0.5)
    flag("--zero-cost", "steps take no simulated time")
    flag(
        "--tape-answers",
        "the load's /generate answers are a fixed tape of ids, not the toy model's greedy tokens (which cost the "
        "server ~2.5 us a token): for benchmarks of the client alone; scoring those answers fails them",
    )
    flag(
        "--spin-process",
        "a child process titled sim::scheduler spins at 100 %% of a core while the engine has work: a host-bound "
        "engine, for perfgate's host-CPU check",
    )
    p.add_argument("--dcgm-names", choices=("classic", "new"), default="classic")
    flag("--fail-at-startup")
    flag("--hang-at-startup")
    p.add_argument("--crash-after-requests", type=_int_at_least(0), default=0, help="0: never")
    flag(
        "--crash-on-prompt-logprobs",
        "die on a request that scores prompt tokens (input logprobs), as SGLang 0.5.12's CPU engine does",
    )
    p.add_argument(
        "--stall-after-requests",
        type=_int_at_least(0),
        default=0,
        help="once this many requests have arrived, the engine stops for --stall-s (a one-off stall); 0: never",
    )
    p.add_argument(
        "--stall-s", type=_finite(0.0, SECONDS_MAX), default=2.0, help="length of that stall in wall seconds"
    )
    p.add_argument("--http-error-rate", type=fraction, default=0.0)
    p.add_argument("--error-chunk-rate", type=fraction, default=0.0)
    p.add_argument("--truncate-rate", type=fraction, default=0.0)
    p.add_argument("--short-rate", type=fraction, default=0.0)
    p.add_argument("--idle-gpus", type=_int_at_least(0), default=0)
    flag(
        "--disable-radix-cache",
        f"no prefix cache: every prompt token is prefilled (SGLang's flag; also {NO_CACHE_ENV}=1)",
    )
    p.add_argument(
        "--prefix-cache-tokens",
        type=_int_at_least(1),
        default=defaults.prefix_cache_tokens,
        help="prefix-cache budget in tokens; least recently used prefixes are evicted beyond it",
    )
    return p


def slowdown_from_env(environ: os._Environ[str] | dict[str, str]) -> float:
    """PERFGATE_SIM_SLOWDOWN as a step-time multiplier; ValueError with a clear message."""
    raw = environ.get(SLOWDOWN_ENV, "").strip()
    if not raw:
        return 1.0
    try:
        value = float(raw)
    except ValueError:
        value = math.nan
    if not 0 < value <= FACTOR_MAX:
        raise ValueError(
            f"{SLOWDOWN_ENV}={raw!r} is not a valid slowdown: set it to a number > 0 and <= {FACTOR_MAX:g} "
            f"such as 1.10 (steps 10% slower) or unset it."
        )
    return value


def boot_speed_from_env(environ: os._Environ[str] | dict[str, str]) -> float:
    """This boot's speed factor under PERFGATE_SIM_BOOT_EFFECT (1.0 when unset); ValueError with a clear message.

    With PERFGATE_SIM_BOOT_SEED_FILE the draw is seeded by the whole number in that file (none
    or an empty file: 0), which is then advanced by one, so that successive boots draw a fixed
    sequence that still differs from boot to boot.
    """
    raw = environ.get(BOOT_EFFECT_ENV, "").strip()
    if not raw:
        return 1.0
    try:
        effect = float(raw)
    except ValueError:
        effect = math.nan
    if not 0 <= effect < 1:
        raise ValueError(
            f"{BOOT_EFFECT_ENV}={raw!r} is not a valid boot effect: set it to a number >= 0 and < 1 such as 0.10 "
            "(each boot runs 0.9x to 1.1x as fast) or unset it."
        )
    seed_file = environ.get(BOOT_SEED_FILE_ENV, "").strip()
    if not seed_file:
        return random.uniform(1 - effect, 1 + effect)
    path = Path(seed_file)
    try:
        text = path.read_text().strip() if path.exists() else ""
        seed = int(text or "0")
        if not 0 <= seed < SEED_MAX:
            raise ValueError(f"{seed} is not between 0 and {SEED_MAX - 1}")
        path.write_text(f"{seed + 1}\n")
    except (OSError, ValueError) as e:
        raise ValueError(
            f"{BOOT_SEED_FILE_ENV}={seed_file!r}: cannot read and advance its seed ({e}); point it at a writable "
            "file holding a whole number (or none) or unset it."
        ) from None
    return random.Random(seed).uniform(1 - effect, 1 + effect)


def no_cache_from_env(environ: os._Environ[str] | dict[str, str]) -> bool:
    """PERFGATE_SIM_DISABLE_RADIX_CACHE as a flag; ValueError with a clear message."""
    return _flag(environ, NO_CACHE_ENV, "no prefix cache")


@dataclass(frozen=True)
class ModelFaults:
    """The wrong models the environment asks for (see ``sim._model``)."""

    corrupt_rate: float = 0.0
    corrupt_above_batch: int = 0
    nan_logprobs: bool = False
    load_one_token: bool = False
    cut_answers: int | None = None
    no_top_logprobs: bool = False


def model_faults_from_env(environ: os._Environ[str] | dict[str, str]) -> ModelFaults:
    """PERFGATE_SIM_CORRUPT_RATE, _CORRUPT_ABOVE_BATCH, _NAN_LOGPROBS, _LOAD_ONE_TOKEN, _CUT_ANSWERS and
    _NO_TOP_LOGPROBS; ValueError with a clear message."""
    rate_raw = environ.get(CORRUPT_RATE_ENV, "").strip()
    rate = 0.0
    if rate_raw:
        try:
            rate = float(rate_raw)
        except ValueError:
            rate = math.nan
        if not 0 <= rate <= 1:
            raise ValueError(
                f"{CORRUPT_RATE_ENV}={rate_raw!r} is not a share of tokens: set it to a number from 0 to 1 "
                "such as 0.05 (5% of output tokens wrong) or unset it."
            )
    batch = _count(
        environ, CORRUPT_ABOVE_BATCH_ENV, 1, "batch size", "tokens computed while more requests run are corrupted"
    )
    nan = _flag(environ, NAN_LOGPROBS_ENV, "every logprob NaN")
    one_token = _flag(environ, LOAD_ONE_TOKEN_ENV, "every token of the load's answers one id, text X")
    cut = _count(environ, CUT_ANSWERS_ENV, 0, "token count", "/generate logprob answers keep that many output tokens")
    no_top = _flag(environ, NO_TOP_LOGPROBS_ENV, "/generate answers without output_top_logprobs")
    return ModelFaults(rate, batch or 0, nan, one_token, cut, no_top)


def _count(environ: os._Environ[str] | dict[str, str], name: str, low: int, what: str, meaning: str) -> int | None:
    """Environment variable ``name`` as a whole number from ``low`` to COUNT_MAX (unset: None);
    ValueError with a clear message."""
    raw = environ.get(name, "").strip()
    if not raw:
        return None
    try:
        value = int(raw)
    except ValueError:
        value = low - 1
    if not low <= value <= COUNT_MAX:
        raise ValueError(
            f"{name}={raw!r} is not a {what}: set it to a whole number from {low} to {COUNT_MAX:,} ({meaning}) "
            "or unset it."
        )
    return value


def _flag(environ: os._Environ[str] | dict[str, str], name: str, meaning: str) -> bool:
    """Environment variable ``name`` as a flag (unset: False); ValueError with a clear message."""
    raw = environ.get(name, "").strip()
    try:
        return _parse_bool(raw) if raw else False
    except ValueError:
        raise ValueError(f"{name}={raw!r} is not true or false: set it to 1 ({meaning}) or unset it.") from None


@dataclass(frozen=True)
class SimOption:
    """One option as a profile's ``[server.sim]`` key (snake_case ``name``)."""

    name: str
    expected: str
    default: object
    action: argparse.Action

    def parse(self, text: str) -> object:
        """The value ``--option text`` gives the simulator; ValueError when it would refuse it."""
        kind = self.action.type
        try:
            value = kind(text) if callable(kind) else text
        except argparse.ArgumentTypeError as err:
            raise ValueError(str(err)) from None
        if self.action.choices is not None and value not in self.action.choices:
            raise ValueError(f"expected {self.expected}, got {text!r}")
        return value


@cache
def sim_options() -> Mapping[str, SimOption]:
    """Every option of :func:`build_parser` by its ``[server.sim]`` key."""
    out = {}
    for action in build_parser()._actions:
        if not action.option_strings or action.dest == "help":
            continue
        if action.choices is not None:
            expected = "one of " + ", ".join(repr(c) for c in action.choices)
        else:
            expected = getattr(action.type, "expected", "a string")
        out[action.dest] = SimOption(action.dest, expected, action.default, action)
    return out


def option_text(value: str | int | float | bool) -> str:
    """A ``[server.sim]`` value as the launcher passes it on the command line."""
    return str(value).lower() if isinstance(value, bool) else str(value)


def conflicts(values: Mapping[str, object]) -> list[tuple[str, str]]:
    """(option, problem) for options that are fine alone but not together (values by snake_case name)."""
    if values["idle_gpus"] > values["gpus"]:  # type: ignore[operator]
        return [("idle_gpus", f"{values['idle_gpus']} idle GPUs is more than gpus = {values['gpus']}")]
    return []


def parse_options(argv: Sequence[str], environ: os._Environ[str] | dict[str, str]) -> SimOptions:
    """Parse the command line (argparse exits with status 2 on a bad option)."""
    parser = build_parser()
    ns = parser.parse_args(list(argv))
    for name, problem in conflicts(vars(ns)):
        parser.error(f"argument --{name.replace('_', '-')}: {problem}")
    try:
        # A faster boot takes less time per step.
        slowdown = slowdown_from_env(environ) / boot_speed_from_env(environ)
        no_cache = no_cache_from_env(environ)
        faults = model_faults_from_env(environ)
        slow_kernel = slow_kernel_from_env(environ)
        telemetry_faults = telemetry_faults_from_env(environ)
    except ValueError as err:
        parser.exit(2, f"{parser.prog}: error: {err}\n")
    values = vars(ns)
    values["disable_radix_cache"] = values["disable_radix_cache"] or no_cache
    values["served_model_name"] = values["served_model_name"] or values["model_path"]
    return SimOptions(
        # A slower kernel makes the whole step as much slower as its share of the step says.
        slowdown=slowdown * slow_kernel.step_factor(),
        version=environ.get(VERSION_ENV, "").strip(),
        corrupt_rate=faults.corrupt_rate,
        corrupt_above_batch=faults.corrupt_above_batch,
        nan_logprobs=faults.nan_logprobs,
        load_one_token=faults.load_one_token,
        cut_answers=faults.cut_answers,
        no_top_logprobs=faults.no_top_logprobs,
        slow_kernel=slow_kernel,
        telemetry_faults=telemetry_faults,
        **values,
    )
