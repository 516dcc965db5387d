"""The A/B's command-line options, declared once for ``perfgate ab`` and pytest's ``--perf-ab``.

As pytest-benchmark shares its option declarations between its plugin and its CLI,
:func:`add_ab_options` takes the ``addoption`` of either (argparse's ``add_argument`` or a
pytest option group's ``addoption``) and the names the options have there (:class:`AbFlags`);
:func:`candidate_from` and :func:`rounds_from` read them back, and ``AbOptions.check`` names
them, so the defaults, the types and the messages are the same on both.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from perfgate.ab._candidate import Candidate, parse_args, parse_env
from perfgate.profile import MAX_REPEATS, integer, option_type

# 6 rounds: the fewest at which the sign test can confirm a change at alpha 0.05 with one
# round to spare (5 is the least), and an even number, so the ABBA blocks are whole.
DEFAULT_ROUNDS = 6
# A round runs each variant once, as a repeat does: the bounds of [gate] repeats.
ROUNDS = integer(1, MAX_REPEATS)


@dataclass(frozen=True)
class AbFlags:
    """What the A/B's options are called on one command line. ``candidate`` prefixes the
    candidate's ``python``, ``env`` and ``args``; ``reason`` and ``lock_wait`` are declared by
    the command itself (the plugin shares them with the gate)."""

    candidate: str
    rounds: str
    max_rounds: str
    accept_candidate: str
    reason: str
    lock_wait: str
    # Put before every help text (the plugin's: "--perf-ab: ").
    note: str = ""

    @property
    def ab_only(self) -> tuple[str, ...]:
        """The options :func:`add_ab_options` declares: they mean something in an A/B only."""
        return (
            f"{self.candidate}python",
            f"{self.candidate}env",
            f"{self.candidate}args",
            self.rounds,
            self.max_rounds,
            self.accept_candidate,
        )


CLI_FLAGS = AbFlags(
    candidate="--candidate-",
    rounds="--rounds",
    max_rounds="--max-rounds",
    accept_candidate="--accept-candidate",
    reason="--reason",
    lock_wait="--lock-wait",
)
PLUGIN_FLAGS = AbFlags(
    candidate="--perf-candidate-",
    rounds="--perf-ab-rounds",
    max_rounds="--perf-ab-max-rounds",
    accept_candidate="--perf-accept-candidate",
    reason="--perf-accept-regression",
    lock_wait="--perf-lock-wait",
    note="--perf-ab: ",
)


def add_ab_options(addoption: Callable[..., Any], flags: AbFlags) -> None:
    """Declare B's change, the rounds and --accept-candidate with ``addoption``, named by ``flags``."""
    note, c = flags.note, flags.candidate
    addoption(
        f"{c}python",
        metavar="PY",
        default=None,
        help=f"{note}B's interpreter: the python of another environment (the upgrade)",
    )
    addoption(
        f"{c}env",
        metavar="NAME=VALUE",
        action="append",
        default=[],
        help=f"{note}an environment variable B's server gets (repeatable)",
    )
    addoption(
        f"{c}args",
        metavar="FLAGS",
        action="append",
        default=[],
        help=f'{note}extra server flags for B, split as a shell does: {c}args "--foo 1" '
        f"(one flag alone: {c}args=--foo)",
    )
    addoption(
        flags.rounds,
        metavar="N",
        type=option_type(ROUNDS),
        default=None,
        help=f"{note}rounds of one A and one B run each (default {DEFAULT_ROUNDS})",
    )
    addoption(
        flags.max_rounds,
        metavar="M",
        type=option_type(ROUNDS),
        default=None,
        help=f"{note}most rounds in all: two more are run at a time while a verdict is inconclusive "
        f"(default 2 x {flags.rounds})",
    )
    addoption(
        flags.accept_candidate,
        action="store_true",
        default=False,
        help=f"{note}record B's runs as the new baselines, with the A/B in their provenance, where B passed "
        f"(with {flags.reason} REASON also where not)",
    )


Get = Callable[[str], Any]


def candidate_from(get: Get, flags: AbFlags) -> Candidate:
    """B's change from the options ``get(flag)`` returns (PerfgateError naming a bad one)."""
    c = flags.candidate
    return Candidate(
        python=get(f"{c}python") or "",
        env=parse_env(get(f"{c}env"), f"{c}env"),
        args=tuple(a for text in get(f"{c}args") for a in parse_args(text, f"{c}args")),
    )


def rounds_from(get: Get, flags: AbFlags) -> tuple[int, int | None]:
    """(rounds, max_rounds) from the options ``get(flag)`` returns."""
    rounds = get(flags.rounds)
    return (DEFAULT_ROUNDS if rounds is None else rounds), get(flags.max_rounds)
