"""Command line of ``python -m perfgate.sim``.

Every option is kebab-case because the launcher forwards a profile's ``[server.sim]`` table
(snake_case keys) as ``--key-with-dashes value``; booleans arrive as ``--flag true|false``.
"""

from __future__ import annotations

import argparse
import math
import os
from collections.abc import Sequence
from dataclasses import dataclass, fields

from perfgate.sim._engine import SimConfig

SLOWDOWN_ENV = "PERFGATE_SIM_SLOWDOWN"
_TRUE = {"true", "1", "yes", "on"}
_FALSE = {"false", "0", "no", "off"}


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
    dcgm_names: str
    fail_at_startup: bool
    hang_at_startup: bool
    crash_after_requests: int
    http_error_rate: float
    error_chunk_rate: float
    truncate_rate: float
    short_rate: float
    idle_gpus: int
    slowdown: float

    def engine_config(self) -> SimConfig:
        """The performance-model part of the options."""
        names = {f.name for f in fields(SimConfig)}
        return SimConfig(**{name: getattr(self, name) for name in names})

    def as_dict(self) -> dict[str, object]:
        return {f.name: getattr(self, f.name) for f in fields(self)}


def _bool(text: str) -> bool:
    lowered = text.strip().lower()
    if lowered in _TRUE:
        return True
    if lowered in _FALSE:
        return False
    raise argparse.ArgumentTypeError(f"expected true or false, got {text!r}")


def _finite(low: float, high: float = math.inf, *, open_low: bool = False):
    def parse(text: str) -> float:
        try:
            value = float(text)
        except ValueError:
            raise argparse.ArgumentTypeError(f"expected a number, got {text!r}") from None
        below = value <= low if open_low else value < low
        if not math.isfinite(value) or below or value > high:
            bound = f"> {low}" if open_low else f">= {low}"
            upper = f" and <= {high}" if math.isfinite(high) else ""
            raise argparse.ArgumentTypeError(f"expected a number {bound}{upper}, got {text!r}")
        return value

    return parse


def _int_at_least(low: int):
    def parse(text: str) -> int:
        try:
            value = int(text)
        except ValueError:
            raise argparse.ArgumentTypeError(f"expected an integer, got {text!r}") from None
        if value < low:
            raise argparse.ArgumentTypeError(f"expected an integer >= {low}, got {value}")
        return value

    return parse


def build_parser() -> argparse.ArgumentParser:
    defaults = SimConfig()
    p = argparse.ArgumentParser(
        prog="python -m perfgate.sim",
        description="An SGLang-compatible LLM serving simulator (perfgate).",
        allow_abbrev=False,
    )
    flag = {"type": _bool, "nargs": "?", "const": True, "default": False, "metavar": "true|false"}
    fraction = _finite(0.0, 1.0)
    p.add_argument("--host", default="127.0.0.1")
    p.add_argument("--port", type=_int_at_least(0), default=30000)
    p.add_argument("--model-path", default="sim/GLM-5-NVFP4")
    p.add_argument("--served-model-name", default="", help="defaults to --model-path")
    p.add_argument("--vocab-size", type=_int_at_least(2), default=151552)
    p.add_argument("--gpus", type=_int_at_least(1), default=8, help="simulated GPUs (tp size)")
    p.add_argument("--gpu-name", default="NVIDIA RTX PRO 6000 Blackwell Server Edition")
    p.add_argument("--power-limit-w", type=_finite(0.0, open_low=True), default=600.0)
    p.add_argument("--idle-power-w", type=_finite(0.0), default=87.0)
    p.add_argument("--full-power-w", type=_finite(0.0), default=250.0, help="power at 100%% busy")
    p.add_argument("--max-running-requests", type=_int_at_least(1), default=defaults.max_running_requests)
    p.add_argument("--chunked-prefill-size", type=_int_at_least(1), default=defaults.chunked_prefill_size)
    p.add_argument(
        "--max-total-tokens",
        type=_int_at_least(1),
        default=defaults.max_total_tokens,
        help="KV-cache pool in tokens; admission reserves prompt + output tokens",
    )
    p.add_argument("--step-fixed-ms", type=_finite(0.0), default=defaults.step_fixed_ms)
    p.add_argument("--step-per-request-ms", type=_finite(0.0), default=defaults.step_per_request_ms)
    p.add_argument(
        "--step-per-prefill-token-ms", type=_finite(0.0), default=defaults.step_per_prefill_token_ms
    )
    p.add_argument("--noise", type=_finite(0.0), default=defaults.noise, help="iid per-step jitter (rel. std)")
    p.add_argument("--drift", type=_finite(0.0), default=defaults.drift, help="slow AR(1) speed factor (rel. std)")
    p.add_argument("--seed", type=int, default=defaults.seed)
    p.add_argument("--time-scale", type=_finite(0.0, open_low=True), default=defaults.time_scale)
    p.add_argument("--stream-interval", type=_int_at_least(1), default=1)
    p.add_argument("--startup-delay-s", type=_finite(0.0), default=0.5)
    p.add_argument("--zero-cost", **flag, help="steps take no simulated time")
    p.add_argument("--dcgm-names", choices=("classic", "new"), default="classic")
    p.add_argument("--fail-at-startup", **flag)
    p.add_argument("--hang-at-startup", **flag)
    p.add_argument("--crash-after-requests", type=_int_at_least(0), default=0, help="0: never")
    p.add_argument("--http-error-rate", type=fraction, default=0.0)
    p.add_argument("--error-chunk-rate", type=fraction, default=0.0)
    p.add_argument("--truncate-rate", type=fraction, default=0.0)
    p.add_argument("--short-rate", type=fraction, default=0.0)
    p.add_argument("--idle-gpus", type=_int_at_least(0), default=0)
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
    if not (math.isfinite(value) and value > 0):
        raise ValueError(
            f"{SLOWDOWN_ENV}={raw!r} is not a valid slowdown: set it to a positive number "
            f"such as 1.10 (steps 10% slower) or unset it."
        )
    return value


def parse_options(argv: Sequence[str], environ: os._Environ[str] | dict[str, str]) -> SimOptions:
    """Parse the command line (argparse exits with status 2 on a bad option)."""
    parser = build_parser()
    ns = parser.parse_args(list(argv))
    if ns.idle_gpus > ns.gpus:
        parser.error(f"argument --idle-gpus: {ns.idle_gpus} is more than --gpus {ns.gpus}")
    try:
        slowdown = slowdown_from_env(environ)
    except ValueError as err:
        parser.exit(2, f"{parser.prog}: error: {err}\n")
    values = vars(ns)
    values["served_model_name"] = values["served_model_name"] or values["model_path"]
    return SimOptions(slowdown=slowdown, **values)
