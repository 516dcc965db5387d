"""Is the server ready? Poll its readiness URL, and give up early on answers that never change.

"Not ready yet" (HTTP 503 during warmup, a read timeout, a launched server that has not
bound its port) is waited out up to ``startup_timeout_s``. Answers that no amount of waiting
fixes fail at once, with the URL and what answered: a URL perfgate cannot request (no
``http://``), a path the server does not have (404/405/410, seen repeatedly), a server that
wants credentials (401/403), a launched server that exited, and, when attaching, an address
where nothing accepts connections for ``connect_timeout_s``.
"""

from __future__ import annotations

import time
from collections.abc import Mapping
from dataclasses import dataclass

import httpx

from perfgate._redact import without_userinfo
from perfgate.errors import ServerError
from perfgate.server._process import ServerProcess, tail_block

_POLL_S = 0.25
# A poll's read timeout. A launched server's polls start short and double on each timeout: a
# process that bound the port before the server did may accept and never answer, and the server's
# exit (EADDRINUSE) must still be seen within seconds. A slow health check still gets its 30 s.
_READ_TIMEOUT_S = 30.0
_FIRST_READ_TIMEOUT_S = 4.0
# A path must answer "not found" this often, over at least this long, before it is believed:
# one 404 from a proxy that has not learned its backend yet is not a verdict.
_NOT_FOUND_PROBES = 3
_NOT_FOUND_SPAN_S = 1.0
_NOT_FOUND = frozenset({404, 405, 410})
_CANDIDATE_PATHS = ("/health_generate", "/health", "/ready", "/v1/models", "/")


def check_url(url: str, where: str) -> None:
    """ServerError unless ``url`` is an absolute http(s) URL with a host and no credentials;
    ``where`` names its source.

    Credentials in a URL (``http://user:password@host``) are refused, not sent: the URL is
    recorded in results, baselines and the terminal, and the servers perfgate drives (SGLang,
    vLLM) take a bearer token, which ``[server] api_key_env`` names without writing it down.
    """
    shown = without_userinfo(url)
    try:
        parsed = httpx.URL(url)
    except (httpx.InvalidURL, TypeError) as e:
        reason = without_userinfo(str(e))
        raise ServerError(f"{where}: {shown!r} is not a URL ({reason}); expected e.g. http://127.0.0.1:30000") from None
    if parsed.scheme not in ("http", "https") or not parsed.host:
        raise ServerError(
            f"{where}: {shown!r} is not an http:// or https:// URL with a host; expected e.g. http://127.0.0.1:30000"
        )
    if parsed.userinfo:
        raise ServerError(
            f"{where}: {shown!r} carries credentials (user:password@): perfgate records the URL in results, "
            "baselines and the terminal, and does not send them; pass the URL without them and put the "
            "server's API key in an environment variable named by [server] api_key_env (sent as a bearer token)"
        )


@dataclass
class _Watch:
    url: str
    headers: Mapping[str, str]
    process: ServerProcess | None
    connect_timeout_s: float | None
    t0: float
    last: str = "no answer yet"
    not_found: int = 0
    first_not_found_s: float = 0.0
    first_refused_s: float | None = None

    def elapsed_s(self) -> float:
        return time.monotonic() - self.t0

    def exited(self) -> None:
        if self.process is None:
            return
        died = self.process.exit_error(f"before {self.url} answered 200")
        if died is not None:
            raise died

    def answered(self, client: httpx.Client, status: int) -> None:
        self.last = f"HTTP {status}"
        if status in _NOT_FOUND:
            if self.not_found == 0:
                self.first_not_found_s = self.elapsed_s()
            self.not_found += 1
            if self.not_found >= _NOT_FOUND_PROBES and self.elapsed_s() - self.first_not_found_s >= _NOT_FOUND_SPAN_S:
                raise ServerError(
                    f"{self.url} answered HTTP {status} {_reason(status)} on every probe: the server has no "
                    "such path; set [server] ready_path to its readiness "
                    f"endpoint{_alternatives(client, self.url, self.headers)}" + self.log()
                )
            return
        self.not_found = 0
        if status in (401, 403):
            sent = (
                "the bearer token perfgate sent was refused"
                if "Authorization" in self.headers
                else "no credentials were sent"
            )
            raise ServerError(
                f"{self.url} answered HTTP {status} {_reason(status)}: {sent}; set [server] api_key_env to the "
                "environment variable holding the server's API key" + self.log()
            )

    def refused(self, error: httpx.TransportError) -> None:
        # A launched server refuses connections until it binds its port; only a server perfgate
        # did not start (connect_timeout_s set) can be at a wrong address.
        self.last = f"{type(error).__name__} ({error})" if str(error) else type(error).__name__
        if self.connect_timeout_s is None:
            return
        if self.first_refused_s is None:
            self.first_refused_s = self.elapsed_s()
        if self.elapsed_s() - self.first_refused_s >= self.connect_timeout_s:
            raise ServerError(
                f"nothing accepts connections at {self.url}: {self.last} for {self.connect_timeout_s:g} s; check "
                "the URL (host, port, http vs https); if the server is still loading its model, raise "
                "[server] connect_timeout_s"
            )

    def log(self) -> str:
        return tail_block(self.process.log_path) if self.process is not None else ""


def _reason(status: int) -> str:
    try:
        return f"({httpx.codes.get_reason_phrase(status)})"
    except ValueError:
        return ""


def _alternatives(client: httpx.Client, url: str, headers: Mapping[str, str]) -> str:
    """Which usual readiness paths do answer 200, as a hint."""
    base = httpx.URL(url).copy_with(path="/", query=None)
    ok = []
    for path in _CANDIDATE_PATHS:
        try:
            if client.get(str(base.copy_with(path=path)), headers=dict(headers)).status_code == 200:
                ok.append(path)
        except httpx.HTTPError:
            continue
    return f" (these paths answer 200: {', '.join(ok)})" if ok else ""


def wait_ready(
    url: str,
    timeout_s: float,
    *,
    headers: Mapping[str, str] | None = None,
    process: ServerProcess | None = None,
    connect_timeout_s: float | None = None,
) -> float:
    """Poll ``url`` until it answers 200; return the seconds it took.

    ``process``: the launched server, watched for an early exit (its log tail goes into every
    error). ``connect_timeout_s``: for a server perfgate did not start, how long refused or
    failing connections are tolerated (None: wait for ``timeout_s`` like any other answer).
    """
    check_url(url, "readiness URL")
    watch = _Watch(
        url, dict(headers or {}), process, connect_timeout_s, process.started_s if process else time.monotonic()
    )
    deadline = watch.t0 + timeout_s
    read_s = _FIRST_READ_TIMEOUT_S if process is not None else _READ_TIMEOUT_S
    with httpx.Client(timeout=httpx.Timeout(_READ_TIMEOUT_S, connect=2.0)) as client:
        while True:
            watch.exited()
            try:
                resp = client.get(url, headers=watch.headers, timeout=httpx.Timeout(read_s, connect=2.0))
            except httpx.ReadTimeout:
                watch.last = f"ReadTimeout (no answer within {read_s:g} s)"
                read_s = min(2 * read_s, _READ_TIMEOUT_S)
            except httpx.UnsupportedProtocol as e:
                raise ServerError(f"{url}: {e}; expected an http:// or https:// URL") from None
            except (httpx.ConnectError, httpx.ConnectTimeout) as e:
                watch.refused(e)
            except httpx.HTTPError as e:
                watch.last = type(e).__name__
            else:
                if resp.status_code == 200:
                    return watch.elapsed_s()
                watch.answered(client, resp.status_code)
            if time.monotonic() >= deadline:
                raise ServerError(
                    f"server not ready after {timeout_s:g} s: {url} last answered {watch.last} "
                    f"(raise [server] startup_timeout_s if the model needs longer to load){watch.log()}"
                )
            time.sleep(_POLL_S)
