"""One request, streamed: send it, read its SSE events as they arrive, say whether it completed."""

from __future__ import annotations

import asyncio
import json
import time
from dataclasses import dataclass
from types import TracebackType

from perfgate._redact import SECRETS
from perfgate.errors import LoadError
from perfgate.load._backends import StreamState
from perfgate.load._dataset import RequestSpec
from perfgate.load._http import HTTPFailure, Pool, Response, Sink
from perfgate.load._plan import LoadPlan
from perfgate.load._records import RequestRecord

# /flush_cache waits for the server's queue to drain (SGLang: up to ?timeout=60).
_FLUSH_STALL_S = 120.0


@dataclass
class Counters:
    """What the streams of one process have done so far (progress reports and self-measurement)."""

    done: int = 0
    errors: int = 0
    in_flight: int = 0
    output_tokens: int = 0
    chunks: int = 0
    retried: int = 0


class EventReader:
    """Splits a stream's bytes into SSE ``data:`` events and folds each into the record.

    Called with whatever bytes one socket read brought: a chunk's time is that read's, so
    chunks that arrived together share one timestamp. Servers send one event per HTTP chunk,
    so that case is recognised with a few C-level checks; anything else is split line by line.
    """

    __slots__ = ("_feed", "_rec", "_state", "_tail", "finished")

    def __init__(self, plan: LoadPlan, rec: RequestRecord, state: StreamState) -> None:
        self._rec = rec
        self._state = state
        self._feed = plan.backend.feed
        self._tail = b""
        self.finished = False

    def data(self, data: bytes, now_s: float) -> bool:
        """Fold ``data``, read at time.monotonic() ``now_s``; True once the stream is over
        ([DONE] or an error chunk)."""
        end = len(data) - 2
        if not self._tail and data.find(b"\n", 6) == end and data[-1] == 0x0A and data.startswith(b"data: "):
            payloads: list[bytes] | tuple[bytes] = (data[6:end],)
        else:
            payloads = self._split(data)
        rec = self._rec
        state = self._state
        offset_s = now_s - rec.start_s
        for payload in payloads:
            if payload == b"[DONE]":
                state.done = True
                return self._over(offset_s)
            n = self._feed(payload, state)
            if state.error:
                return self._over(offset_s)
            if n:
                rec.add_chunk(offset_s, n)
        return False

    def _split(self, data: bytes) -> list[bytes]:
        """The payloads of the complete ``data:`` lines; a partial last line waits for the next read."""
        lines = (self._tail + data).split(b"\n")
        self._tail = lines.pop()
        return [_payload(line) for line in lines if line.startswith(b"data:")]

    def _over(self, offset_s: float) -> bool:
        self._rec.latency_s = offset_s
        self.finished = True
        return True

    def end(self, now_s: float) -> None:
        """The body ended at ``now_s``: a last event without its newline still counts."""
        if self._tail:
            self.data(b"\n", now_s)
        if not self.finished:
            self._over(now_s - self._rec.start_s)


def _payload(line: bytes) -> bytes:
    """The value of a ``data:`` line: one leading space and a trailing CR are not part of it
    (SSE); any other whitespace is JSON's."""
    value = line[5:]
    if value.startswith(b" "):
        value = value[1:]
    return value[:-1] if value.endswith(b"\r") else value


class Streamer:
    """Sends requests and reads their streams over one connection pool; counts what it has seen.

    ``async with Streamer(plan) as streamer`` opens the pool and closes every connection.
    """

    def __init__(self, plan: LoadPlan) -> None:
        self.plan = plan
        self.counters = Counters()
        self._pool: Pool | None = None

    async def __aenter__(self) -> Streamer:
        self._pool = Pool(self.plan.base_url, self.plan.headers, keep_alive=self.plan.keep_alive)
        return self

    async def __aexit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        if self._pool is not None:
            self._pool.close()
            self._pool = None
            # Let the closed connections' callbacks run before the loop goes away.
            await asyncio.sleep(0)

    @property
    def pool(self) -> Pool:
        assert self._pool is not None, "use the Streamer as an async context manager"
        return self._pool

    async def flush_cache(self) -> None:
        """POST /flush_cache (SGLang): the next requests find no cached prefix."""
        url = self.plan.base_url.rstrip("/") + "/flush_cache?timeout=60"
        fix = "set flush_cache = false for servers without /flush_cache"
        try:
            resp = await self.pool.request(
                "POST",
                "/flush_cache?timeout=60",
                b"",
                sink=None,
                stall_s=_FLUSH_STALL_S,
                headers=self.plan.flush_headers,
            )
        except HTTPFailure as e:
            raise LoadError(f"POST {url} failed: {e}; {fix}") from None
        if resp.status != 200:
            raise LoadError(f"POST {url} answered HTTP {resp.status}: {_quoted(resp.body, 200)}; {fix}")

    async def one(self, index: int, spec: RequestSpec, max_tokens: int) -> RequestRecord:
        """Send ``spec`` asking for ``max_tokens`` tokens and read its stream to the end."""
        plan = self.plan
        counters = self.counters
        rec = RequestRecord(index=index, input_tokens=spec.input_len, requested_output_tokens=max_tokens)
        state = StreamState()
        body = json.dumps(plan.backend.body(spec, max_tokens)).encode()
        events = EventReader(plan, rec, state)
        counters.in_flight += 1
        rec.start_s = time.monotonic()
        try:
            resp = await self._send(body, rec, events.data)
            if resp.status != 200:
                state.error = f"HTTP {resp.status} from {plan.backend.path}: {_quoted(resp.body, 300)}"
            elif not events.finished:
                events.end(resp.end_s)
        except HTTPFailure as e:
            state.error = self._reason(e, state)
        finally:
            counters.in_flight -= 1
        if rec.latency_s is None:
            # A failed request leaves the in-flight count when it fails, not at the end of the run.
            rec.latency_s = time.monotonic() - rec.start_s
        counters.chunks += len(rec.chunk_offsets_s)
        counted_by_guess = state.guessed_chunks == len(rec.chunk_tokens)
        if counted_by_guess and state.server_tokens is not None and state.tokens != state.server_tokens:
            rec.spread_tokens(state.server_tokens)
        rec.output_tokens = state.server_tokens
        if state.server_prompt_tokens is not None:
            rec.input_tokens = state.server_prompt_tokens
        rec.error = state.error or self._completeness_error(state, max_tokens)
        counters.done += 1
        if rec.error:
            counters.errors += 1
        else:
            counters.output_tokens += state.server_tokens if state.server_tokens is not None else state.tokens
        return rec

    async def _send(self, body: bytes, rec: RequestRecord, sink: Sink) -> Response:
        """POST ``body``; returns once the stream is over.

        A pooled keep-alive connection that the server had already closed fails before any
        answer: the server never saw the request, so it is sent once more on a connection of
        its own, and the record says so. A refused or failing connect is not retried: that
        server is down.
        """
        path = self.plan.backend.path
        stall_s = self.plan.workload.stall_timeout_s
        try:
            return await self.pool.request("POST", path, body, sink=sink, stall_s=stall_s)
        except HTTPFailure as e:
            if e.kind != "stale":
                raise
        rec.retried = True
        self.counters.retried += 1
        rec.start_s = time.monotonic()
        return await self.pool.request("POST", path, body, sink=sink, stall_s=stall_s, fresh=True)

    def _reason(self, failure: HTTPFailure, state: StreamState) -> str:
        """A failed request's reason; its first word names the kind of failure in the summary."""
        if failure.kind == "stall":
            return f"stream stalled: no data for {self.plan.workload.stall_timeout_s:g} s"
        if failure.kind == "broken":
            return f"truncated stream: connection broke ({failure}) after {state.tokens} tokens"
        if failure.kind == "sink":
            return f"unparseable stream chunk: {failure}"
        if failure.kind == "protocol":
            return f"invalid response: {failure}"
        return f"connection error: {failure} (after {state.tokens} tokens)"

    def _completeness_error(self, state: StreamState, max_tokens: int) -> str:
        # Servers that never send [DONE] (transformers serve) end their stream with a finish_reason.
        if not state.done and state.finish_reason is None:
            return f"truncated stream: ended after {state.tokens} tokens without [DONE] or a finish_reason"
        # Without the server's count only chunks were counted, and one chunk can carry several
        # tokens: too few chunks proves nothing (the metrics say the counts are unknown).
        if self.plan.workload.ignore_eos and state.server_tokens is not None and state.server_tokens < max_tokens:
            return (
                f"short stream: {state.server_tokens} of {max_tokens} tokens with ignore_eos "
                f"(finish_reason {state.finish_reason!r})"
            )
        return ""


def _quoted(body: bytes, limit: int) -> str:
    """The start of a server's answer for a message, redacted before it is cut, so that no part
    of a secret the server echoed back (a 401 page quoting the Authorization header) is shown."""
    # A little more than shown is redacted: enough for any key that starts inside the limit.
    return SECRETS.text(body[: limit + 4096].decode(errors="replace")).strip()[:limit]
