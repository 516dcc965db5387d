"""One bounded GET of a Prometheus endpoint (a server's /metrics, a dcgm-exporter).

Every scrape runs on a sampler thread of the process that also runs the load client, so what one
answer may cost is bounded: bytes read, series in it, and wall time. A scrape past a bound raises
:class:`ScrapeBound`; the caller drops that source for the rest of the run and says so once (a
source that was too big or too slow once will be again, and each retry would cost the client).
"""

from __future__ import annotations

import time
from dataclasses import dataclass

import httpx

from perfgate.errors import TelemetryError

_MIB = 2**20
_ADVICE = "fix the endpoint or leave it out of the profile"


@dataclass(frozen=True)
class ScrapeLimits:
    """What one scrape may cost.

    The defaults are tens of times what real endpoints serve: SGLang's /metrics is ~750 lines
    (~100 KB), vLLM's a few hundred series, dcgm-exporter's ~40 series per GPU (~0.5 MB for a
    busy 8-GPU node with profiling fields). ``max_series`` counts sample lines (comments aside),
    ``max_read_series`` those of the metrics perfgate reads (what is parsed and kept: the server's
    counters and gauges, ~20 series on SGLang; dcgm's ~25 per GPU). ``deadline_s`` bounds the
    whole answer, headers to last byte (a server that trickles bytes never trips a read timeout).
    """

    max_bytes: int = 4 * _MIB
    max_series: int = 20_000
    max_read_series: int = 2_000
    deadline_s: float = 5.0


class ScrapeBound(TelemetryError):
    """A scrape went past one of its :class:`ScrapeLimits`; the message names the URL and the bound."""


def bounded_get(client: httpx.Client, url: str, limits: ScrapeLimits) -> str:
    """The body of ``GET url`` as text, read within ``limits``.

    Raises :class:`ScrapeBound` past a bound (the connection is closed at once, nothing more is
    read), ``httpx.HTTPStatusError`` for a non-2xx answer and ``httpx.HTTPError`` for the rest.
    """
    started_s = time.monotonic()
    try:
        # The read timeout is the deadline too: a server that stops sending ends within it.
        with client.stream("GET", url, timeout=limits.deadline_s) as response:
            response.raise_for_status()
            declared = response.headers.get("content-length", "")
            if declared.isdigit() and int(declared) > limits.max_bytes:
                raise ScrapeBound(
                    f"{url} announced {int(declared) / _MIB:,.1f} MiB, more than the {limits.max_bytes / _MIB:g} MiB "
                    f"perfgate reads from a metrics endpoint; not read again this run: {_ADVICE}"
                )
            chunks: list[bytes] = []
            size = 0
            for chunk in response.iter_bytes():
                size += len(chunk)
                if size > limits.max_bytes:
                    raise ScrapeBound(
                        f"{url} answered more than the {limits.max_bytes / _MIB:g} MiB perfgate reads from a metrics "
                        f"endpoint; not read again this run: {_ADVICE}"
                    )
                if time.monotonic() - started_s > limits.deadline_s:
                    raise _too_slow(url, limits)
                chunks.append(chunk)
    except httpx.TimeoutException:
        raise _too_slow(url, limits) from None
    body = b"".join(chunks)
    # Counted in C (bytes.count), not line by line: the bound must be cheap to check.
    series = body.count(b"\n") + (not body.endswith(b"\n")) - body.count(b"\n#") - body.startswith(b"#")
    if series > limits.max_series:
        raise ScrapeBound(
            f"{url} answered {series:,} series, more than the {limits.max_series:,} perfgate reads from a metrics "
            f"endpoint; not read again this run: {_ADVICE}"
        )
    return body.decode("utf-8", errors="replace")


def metric_lines(text: str, names: frozenset[str]) -> list[str]:
    """The lines of ``text`` about the metrics named ``names`` (samples, # HELP and # TYPE): what
    perfgate parses. An exporter serves many more (SGLang ~750 lines, dcgm-exporter fields perfgate
    does not use), and the Prometheus parser costs ~25 us of CPU per line."""
    keep = []
    for line in text.splitlines():
        if line.startswith("# "):
            parts = line.split(" ", 3)
            name = parts[2] if len(parts) > 2 else ""
        else:
            name = line.split("{", 1)[0].split(" ", 1)[0]
        if name in names:
            keep.append(line)
    return keep


def check_read_series(url: str, lines: list[str], limits: ScrapeLimits) -> None:
    """:class:`ScrapeBound` when ``lines`` (of the metrics perfgate reads, from :func:`metric_lines`)
    hold more than ``limits.max_read_series`` series."""
    series = sum(not line.startswith("#") for line in lines)
    if series > limits.max_read_series:
        raise ScrapeBound(
            f"{url} answered {series:,} series of the metrics perfgate reads, more than "
            f"{limits.max_read_series:,}; not read again this run: {_ADVICE}"
        )


def _too_slow(url: str, limits: ScrapeLimits) -> ScrapeBound:
    return ScrapeBound(
        f"{url} did not answer within {limits.deadline_s:g} s; not read again this run (a scrape that hangs "
        f"would hold up the sampler and the run's edges): {_ADVICE}"
    )
