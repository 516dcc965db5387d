"""Per-request records, stored compactly enough for 100,000-request workloads."""

from __future__ import annotations

from array import array
from dataclasses import dataclass, field


@dataclass(frozen=True, slots=True)
class OutputSample:
    """What one request's answer said about its own content, kept after the stream instead of the
    answer itself (see :func:`perfgate.load.degenerate_output`).

    ``ids``: the output ids it carried (those of SGLang's last chunk, cumulative by default; 0 on
    OpenAI APIs, which stream no ids). ``one_id``: the id every one of them is, None when they
    differ or none came. ``tokens``: the tokens its text must spell (``ids``, or the server's
    count where no ids came). ``text``: whether any text came; None when the answer has no text
    field at all (SGLang's ``--skip-tokenizer-init`` sends ids only).
    """

    ids: int
    one_id: int | None
    tokens: int
    text: bool | None


@dataclass(frozen=True, slots=True)
class KeptAnswer:
    """A sampled request's prompt and answer ids, kept whole to be scored teacher-forced after the
    run (``LoadPlan.keep_answers``): the rest keep only their :class:`OutputSample`."""

    prompt_ids: array[int]
    output_ids: array[int]
    # The answer's whole text, as streamed (None: the stream carried no text field).
    text: str | None = None


@dataclass(slots=True)
class RequestRecord:
    """What the client saw of one request.

    ``start_s`` is time.monotonic() just before the POST. Chunk arrival times are float32
    offsets in seconds from ``start_s`` (8 us resolution at 100 s: far below network jitter)
    with the number of tokens each chunk carried, so a 128-token stream costs ~1 KB.
    """

    index: int
    input_tokens: int
    requested_output_tokens: int
    start_s: float = 0.0
    chunk_offsets_s: array[float] = field(default_factory=lambda: array("f"))
    chunk_tokens: array[int] = field(default_factory=lambda: array("H"))
    # Server-reported completion tokens; None when the server reported none.
    output_tokens: int | None = None
    ttft_s: float | None = None
    # Seconds from the send to the end of the request: its last chunk, or the moment it failed.
    latency_s: float | None = None
    error: str = ""
    # Sent a second time on a fresh connection after a reused one failed before any answer.
    retried: bool = False
    # None when the answer carried nothing to check (an SGLang server that sends no output_ids).
    output: OutputSample | None = None
    # The whole answer, for the few requests sampled to be scored (None for the others).
    kept: KeptAnswer | None = None

    def add_chunk(self, offset_s: float, tokens: int) -> None:
        """Record a chunk that arrived ``offset_s`` after the start carrying ``tokens`` (>= 1) tokens."""
        if self.ttft_s is None:
            self.ttft_s = offset_s
        self.chunk_offsets_s.append(offset_s)
        self.chunk_tokens.append(tokens if tokens < 65535 else 65535)

    def spread_tokens(self, total: int) -> None:
        """Give the chunks ``total`` tokens in all, evenly (the remainder to the last chunks).

        For streams whose chunks carried no counts of their own but whose server reported the
        total at the end: one chunk can carry several tokens, so counting one per chunk would
        undercount every token-based figure of the window (throughput, TPOT, tokens per joule).
        """
        n = len(self.chunk_tokens)
        if not n:
            return
        base, extra = divmod(total, n)
        for i in range(n):
            self.chunk_tokens[i] = min(base + (1 if i >= n - extra else 0), 65535)

    @property
    def ok(self) -> bool:
        return not self.error and self.latency_s is not None
