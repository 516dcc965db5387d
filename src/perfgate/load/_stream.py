"""One request, streamed: send it, read its SSE events as they arrive, say whether it completed."""

from __future__ import annotations

import time
from dataclasses import dataclass
from types import TracebackType

import aiohttp

from perfgate.errors import LoadError
from perfgate.load._backends import StreamState
from perfgate.load._dataset import RequestSpec
from perfgate.load._plan import LoadPlan
from perfgate.load._records import RequestRecord


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

    Whatever bytes have arrived are split here, not line by line by the HTTP library: its
    per-line reader costs more CPU than the parsing. A chunk's time is when the read that
    completed it returned, so chunks that arrived together share one timestamp.
    """

    __slots__ = ("_rec", "_state", "_feed", "_tail")

    def __init__(self, plan: LoadPlan, rec: RequestRecord, state: StreamState) -> None:
        self._rec = rec
        self._state = state
        self._feed = plan.backend.feed
        self._tail = b""

    def data(self, data: bytes, now: float) -> bool:
        """Fold ``data``, read ``now`` seconds after the request's start; True once the stream is
        over ([DONE] or an error chunk)."""
        lines = (self._tail + data if self._tail else data).split(b"\n")
        self._tail = lines.pop()
        state = self._state
        for line in lines:
            if not line.startswith(b"data:"):
                continue
            payload = line[5:].strip()
            if payload == b"[DONE]":
                state.done = True
                self._rec.latency_s = now
                return True
            n = self._feed(payload, state)
            if state.error:
                self._rec.latency_s = now
                return True
            if n:
                self._rec.add_chunk(now, n)
        return False

    def end(self, now: float) -> None:
        """The body ended ``now``: a last event without its newline still counts."""
        tail = self._tail
        state = self._state
        if tail.startswith(b"data:"):
            payload = tail[5:].strip()
            if payload == b"[DONE]":
                state.done = True
            else:
                n = self._feed(payload, state)
                if n and not state.error:
                    self._rec.add_chunk(now, n)
        self._rec.latency_s = now


def new_session(keep_alive: bool = True) -> aiohttp.ClientSession:
    """The client's HTTP session: unlimited connections; without ``keep_alive`` each request gets
    a connection of its own (for servers that close connections without saying so)."""
    connector = aiohttp.TCPConnector(limit=0, force_close=not keep_alive)
    return aiohttp.ClientSession(connector=connector, timeout=aiohttp.ClientTimeout(total=None))


class Streamer:
    """Sends requests and reads their streams over one HTTP session; counts what it has seen.

    ``async with Streamer(plan) as streamer`` opens the session and closes every connection.
    """

    def __init__(self, plan: LoadPlan) -> None:
        self.plan = plan
        self.counters = Counters()
        self._session: aiohttp.ClientSession | None = None
        self._fresh: aiohttp.ClientSession | None = None

    async def __aenter__(self) -> Streamer:
        self._session = new_session(self.plan.keep_alive)
        return self

    async def __aexit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        for session in (self._session, self._fresh):
            if session is not None:
                await session.close()
        self._session = self._fresh = None

    @property
    def session(self) -> aiohttp.ClientSession:
        assert self._session is not None, "use the Streamer as an async context manager"
        return self._session

    async def flush_cache(self) -> None:
        """POST /flush_cache (SGLang): the next requests find no cached prefix."""
        url = self.plan.base_url.rstrip("/") + "/flush_cache?timeout=60"
        plan = self.plan
        headers = plan.headers if plan.flush_headers is None else plan.flush_headers
        async with self.session.post(url, headers=dict(headers)) as resp:
            if resp.status != 200:
                raise LoadError(
                    f"POST {url} answered HTTP {resp.status}: {(await resp.text())[:200]}; "
                    "set flush_cache = false for servers without /flush_cache"
                )

    async def one(self, index: int, spec: RequestSpec, max_tokens: int) -> RequestRecord:
        """Send ``spec`` asking for ``max_tokens`` tokens and read its stream to the end."""
        plan = self.plan
        counters = self.counters
        rec = RequestRecord(index=index, input_tokens=spec.input_len, requested_output_tokens=max_tokens)
        state = StreamState()
        body = plan.backend.body(spec, max_tokens)
        counters.in_flight += 1
        rec.start_s = time.monotonic()
        try:
            resp = await self._send(body, rec)
            async with resp:
                if resp.status != 200:
                    text = (await resp.text())[:300].strip()
                    state.error = f"HTTP {resp.status} from {plan.backend.path}: {text}"
                else:
                    await self._read(resp.content, rec, state)
        except TimeoutError:
            state.error = f"stream stalled: no data for {plan.workload.stall_timeout_s:g} s"
        except aiohttp.ClientPayloadError as e:
            state.error = f"truncated stream: connection broke ({type(e).__name__}: {e}) after {state.tokens} tokens"
        except aiohttp.ClientError as e:
            state.error = f"connection error: {type(e).__name__}: {e} (after {state.tokens} tokens)"
        except ValueError as e:
            state.error = f"unparseable stream chunk: {e}"
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

    async def _send(self, body: dict[str, object], rec: RequestRecord) -> aiohttp.ClientResponse:
        """POST ``body``; returns once the response headers arrived.

        A pooled keep-alive connection that the server had already closed fails before any
        answer ("Can not write request body", "Server disconnected"): the server never saw
        the request, so it is sent once more on a connection of its own, and the record says
        so. A refused or failing connect is not retried: that server is down.
        """
        plan = self.plan
        timeout = aiohttp.ClientTimeout(total=None, sock_connect=30, sock_read=plan.workload.stall_timeout_s)
        headers = dict(plan.headers)
        try:
            return await self.session.post(plan.url, json=body, headers=headers, timeout=timeout)
        except (aiohttp.ServerDisconnectedError, aiohttp.ClientOSError) as e:
            if isinstance(e, aiohttp.ClientConnectorError):
                raise
        if self._fresh is None:
            self._fresh = new_session(keep_alive=False)
        rec.retried = True
        self.counters.retried += 1
        rec.start_s = time.monotonic()
        return await self._fresh.post(plan.url, json=body, headers=headers, timeout=timeout)

    async def _read(self, content: aiohttp.StreamReader, rec: RequestRecord, state: StreamState) -> None:
        """Read SSE events until [DONE], an error chunk or the end of the body."""
        clock = time.monotonic
        start = rec.start_s
        events = EventReader(self.plan, rec, state)
        async for data in content.iter_any():
            if events.data(data, clock() - start):
                return
        events.end(clock() - start)

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
