"""One request, streamed: send it, read its SSE events as they arrive, say whether it completed."""

from __future__ import annotations

import asyncio
import json
import time
from collections.abc import Callable
from dataclasses import dataclass
from types import TracebackType

from perfgate._redact import SECRETS
from perfgate.errors import LoadError
from perfgate.load._backends import StreamState
from perfgate.load._dataset import RequestSpec
from perfgate.load._http import NOTHING, OVER, PROGRESS, Fed, HTTPFailure, Pool, Response, Sink
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

    def data(self, data: bytes, now_s: float) -> Fed:
        """Fold ``data``, read at time.monotonic() ``now_s``: OVER once the stream is over
        ([DONE] or an error chunk), PROGRESS when its data events told something new (a token,
        a count, a prompt count, a finish reason), else NOTHING (comments, blank lines,
        ``event:`` or ``id:`` lines, part of a line, ``data: {}``, a chunk sent again)."""
        end = len(data) - 2
        if not self._tail and data.find(b"\n", 6) == end and data[-1] == 0x0A and data.startswith(b"data: "):
            payloads: list[bytes] | tuple[bytes] = (data[6:end],)
        else:
            payloads = self._split(data)
        rec = self._rec
        state = self._state
        mark = state.progress()
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
        return PROGRESS if state.progress() != mark else NOTHING

    def _split(self, data: bytes) -> list[bytes]:
        """The payloads of the complete ``data:`` lines; a partial last line waits for the next read."""
        lines = (self._tail + data).split(b"\n")
        self._tail = lines.pop()
        return [_payload(line) for line in lines if line.startswith(b"data:")]

    def _over(self, offset_s: float) -> Fed:
        self._rec.latency_s = offset_s
        self.finished = True
        return OVER

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
                state.error = f"HTTP {resp.status} from {plan.backend.path}: {self._quote(resp.body)}"
            elif resp.not_stream:
                state.error = (
                    f"not a stream: HTTP 200 from {plan.backend.path} with Content-Type {resp.not_stream}, "
                    f"not text/event-stream; the body starts: {self._quote(resp.body)}"
                )
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
        rec.output = plan.backend.output_sample(state)
        if index in plan.keep_answers and not state.error:
            rec.kept = plan.backend.kept_answer(spec, state)
        if state.server_prompt_tokens is not None:
            rec.input_tokens = state.server_prompt_tokens
        rec.error = state.error or self._completeness_error(state, spec.input_len, max_tokens)
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

    def _quote(self, body: bytes) -> str:
        """The start of a body the server sent instead of a stream, with the keys redacted (a
        proxy's error page may echo the request's Authorization header)."""
        # The registry holds the keys (a client process registers its plan's when it starts).
        return _quoted(body, 300, SECRETS.clip)

    def _reason(self, failure: HTTPFailure, state: StreamState) -> str:
        """A failed request's reason; its first word names the kind of failure in the summary."""
        if failure.kind == "stall":
            return f"stream stalled: {failure}"
        if failure.kind == "broken":
            return f"truncated stream: connection broke ({failure}) after {state.tokens} tokens"
        if failure.kind == "sink":
            return f"unparseable stream chunk: {failure}"
        if failure.kind == "protocol":
            return f"invalid response: {failure}"
        return f"connection error: {failure} (after {state.tokens} tokens)"

    def _completeness_error(self, state: StreamState, sent_tokens: int, max_tokens: int) -> str:
        # Servers that never send [DONE] (transformers serve) end their stream with a finish_reason.
        if not state.done and state.finish_reason is None:
            return f"truncated stream: ended after {state.tokens} tokens without [DONE] or a finish_reason"
        # Before the short-stream check: a count that contradicts the stream says nothing of its length.
        miscounted = count_error(state, sent_tokens, max_tokens, self.plan.backend.prompt_is_ids)
        if miscounted:
            return miscounted
        # Without the server's count only chunks were counted, and one chunk can carry several
        # tokens: too few chunks proves nothing (the metrics say the counts are unknown).
        if self.plan.workload.ignore_eos and state.server_tokens is not None and state.server_tokens < max_tokens:
            return (
                f"short stream: {state.server_tokens} of {max_tokens} tokens with ignore_eos "
                f"(finish_reason {state.finish_reason!r})"
            )
        return ""


# Text prompts (chat) are counted by the server's tokenizer and chat template; the client's
# length is the words it sent. A count outside [sent / 4, 4 x sent + 512] is no tokenizer's
# reading of those words: the server counts something else.
TEXT_PROMPT_FACTOR = 4
TEXT_PROMPT_TEMPLATE_TOKENS = 512


def count_error(state: StreamState, sent_tokens: int, max_tokens: int, prompt_is_ids: bool) -> str:
    """Why a completed stream's token counts cannot be trusted; "" when they agree.

    The rule, for every backend: a content chunk carries at least one token and a request
    yields at most ``max_tokens``, so ``chunks <= max_tokens``; where the server counts
    (meta_info / usage), ``chunks <= count <= max_tokens`` (a count above the chunks is the
    several-tokens-per-chunk case, above ``max_tokens`` it is not a count of this stream).
    With ignore_eos the count must equal ``max_tokens`` (fewer is a short stream, checked
    before). Prompt tokens the server reports must equal the ids sent by id backends, and lie
    within the bounds above for text prompts.
    """
    server, chunks = state.server_tokens, state.content_chunks
    if chunks > max_tokens:
        return f"token count: {chunks} content chunks streamed for at most {max_tokens} tokens asked (max_tokens)"
    if server is not None and server > max_tokens:
        return f"token count: the server counted {server} output tokens, more than the {max_tokens} asked (max_tokens)"
    if server is not None and server < chunks:
        return (
            f"token count: the server counted {server} output tokens but streamed {chunks} content chunks "
            "(each carries at least one token)"
        )
    prompt = state.server_prompt_tokens
    if prompt is None:
        return ""
    if prompt_is_ids:
        if prompt != sent_tokens:
            return f"token count: the server counted {prompt} prompt tokens, {sent_tokens} token ids were sent"
        return ""
    low, high = sent_tokens // TEXT_PROMPT_FACTOR, TEXT_PROMPT_FACTOR * sent_tokens + TEXT_PROMPT_TEMPLATE_TOKENS
    if not low <= prompt <= high:
        return (
            f"token count: the server counted {prompt} prompt tokens for a prompt of about {sent_tokens} tokens "
            f"(outside {low}..{high})"
        )
    return ""


def _quoted(body: bytes, limit: int, clip: Callable[[str, int], str] = SECRETS.clip) -> str:
    """The start of a server's answer for a message, redacted before it is cut (see
    :meth:`SecretRegistry.clip`), so that no part of a secret the server echoed back (a 401
    page quoting the Authorization header) is shown."""
    # Only a little more than is shown is decoded: enough for any key that starts inside the limit.
    # Redacted before the spacing is evened out too, which could change a key with two spaces.
    text = SECRETS.text(body[: limit + 4096].decode(errors="replace"))
    return clip(" ".join(text.split()), limit)
