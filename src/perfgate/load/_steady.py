"""``warmup = "steady"``: warmup rounds until the server's speed stops changing.

A fixed count of warmup requests can end before a server is at its steady speed (Triton kernels
compiled on first use, batch sizes not yet seen, caches still cold), and the measured phase then
holds the rest of that ramp. A steady warmup runs rounds of ``warmup_requests`` requests at the
workload's concurrency and full lengths, and stops when two consecutive rounds' output throughput
agree within ``warmup_tolerance``, or when ``warmup_max_s`` has passed: then the repeat is invalid
(the measured phase would start on a server still changing speed; a baseline of it would be a
moving target, and a gate of it could pass by accident).
"""

from __future__ import annotations

from dataclasses import dataclass

from perfgate.load._records import RequestRecord


def round_rate(records: list[RequestRecord], elapsed_s: float) -> float:
    """Output tokens per second of one warmup round: every token the client received over the
    round's wall time (its ramp and its tail included, alike in every round)."""
    tokens = sum(sum(r.chunk_tokens) for r in records)
    return tokens / elapsed_s if elapsed_s > 0 else 0.0


def settled(previous: float, last: float, tolerance: float) -> bool:
    """Two rounds agree: they differ by at most ``tolerance`` of the larger (both measured something)."""
    high = max(previous, last)
    return high > 0 and min(previous, last) > 0 and abs(last - previous) <= tolerance * high


@dataclass(frozen=True)
class SteadyWarmup:
    """What a steady warmup did: each round's output tok/s, the time it took, and whether it settled."""

    rates: tuple[float, ...]
    time_s: float
    converged: bool
    tolerance: float
    max_s: float

    @property
    def rounds(self) -> int:
        return len(self.rates)

    def last_two(self) -> str:
        shown = ", ".join(f"{r:,.0f}" for r in self.rates[-2:])
        return f"{shown} output tok/s"

    def note(self) -> str:
        """One line for the summary."""
        if self.converged:
            return (
                f'warmup = "steady": settled after {self.rounds} rounds in {self.time_s:.1f} s '
                f"(last two {self.last_two()}, within {self.tolerance:.0%})"
            )
        return (
            f'warmup = "steady": not settled after {self.rounds} round(s) in {self.time_s:.1f} s '
            f"(warmup_max_s {self.max_s:g}; last {self.last_two()}; tolerance {self.tolerance:.0%})"
        )

    def invalid_reason(self) -> str:
        """Why the repeat is invalid, or "" when the warmup settled."""
        if self.converged:
            return ""
        return (
            f"{self.note()}: the server was still changing speed when measuring began; raise warmup_max_s, "
            "warmup_requests (longer rounds vary less) or warmup_tolerance"
        )

    def as_json(self) -> dict[str, object]:
        return {
            "mode": "steady",
            "rounds": self.rounds,
            "time_s": self.time_s,
            "round_output_throughput": list(self.rates),
            "converged": self.converged,
            "tolerance": self.tolerance,
            "max_s": self.max_s,
        }
