"""How each API is asked for tokens and how its stream is read.

A backend turns a RequestSpec into (path, JSON body) and folds each streamed ``data:`` payload
into a StreamState. It never assumes the requested length: output tokens come from the
server (meta_info / usage) or stay None, and the result says so.
"""

from __future__ import annotations

import json
from array import array
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from perfgate._redact import SECRETS
from perfgate.load._dataset import RequestSpec
from perfgate.load._records import KeptAnswer, OutputSample


@dataclass(slots=True)
class StreamState:
    """What has been read so far from one stream."""

    tokens: int = 0
    server_tokens: int | None = None
    # Prompt tokens as the server counted them (meta_info / usage); chat prompts are text, so
    # only the server knows their length in tokens.
    server_prompt_tokens: int | None = None
    # Chunks that carried generated content (a /generate chunk whose count or text grew, an
    # OpenAI chunk with text), each at least one token, whether or not a count moved with it.
    content_chunks: int = 0
    # Content chunks that came without a token count and were counted as one token each.
    guessed_chunks: int = 0
    finish_reason: str | None = None
    done: bool = False
    error: str = ""
    # The /generate chunk with the finish_reason, when it carried output_ids: that chunk is always
    # parsed and holds the whole answer (cumulative), so the answer is read once, after the stream.
    answer: dict[str, Any] | None = None

    def progress(self) -> tuple[int, int | None, int | None, str | None]:
        """What a new token, count, prompt count or finish reason changes (tokens only grow with
        content chunks): two equal marks mean the stream told nothing new in between."""
        return (self.content_chunks, self.server_tokens, self.server_prompt_tokens, self.finish_reason)


class Backend:
    name = ""
    path = ""
    # The prompt is sent as token ids, so the server's prompt count must equal their number.
    prompt_is_ids = True

    def __init__(self, model: str, ignore_eos: bool, extra_body: Mapping[str, Any]) -> None:
        self.model = model
        self.ignore_eos = ignore_eos
        self.extra_body = dict(extra_body)

    def body(self, spec: RequestSpec, max_tokens: int) -> dict[str, Any]:
        raise NotImplementedError

    def feed(self, payload: bytes, state: StreamState) -> int:
        """Fold one ``data:`` payload into ``state``; return the number of new tokens it carried."""
        raise NotImplementedError

    def output_sample(self, state: StreamState) -> OutputSample | None:
        """What the finished stream said about its content: OpenAI APIs stream text without ids,
        so only whether text came for the tokens the server counted."""
        return OutputSample(ids=0, one_id=None, tokens=state.server_tokens or 0, text=state.content_chunks > 0)

    def kept_answer(self, spec: RequestSpec, state: StreamState) -> KeptAnswer | None:
        """The prompt's and the whole answer's ids, when the stream carried them all (the OpenAI
        APIs stream text alone: None)."""
        return None

    def _merge(self, body: dict[str, Any]) -> dict[str, Any]:
        body.update(self.extra_body)
        return body


def _object(value: Any, what: str) -> dict[str, Any]:
    """``value`` when it is a JSON object (a missing or null one reads as empty), else ValueError:
    the client reports a chunk of the wrong shape like one that is not JSON at all."""
    if value is None:
        return {}
    if not isinstance(value, dict):
        raise ValueError(f"{what} is a {type(value).__name__}, expected an object")
    return value


def _count(value: Any) -> int | None:
    """A token count the server sent, or None when it sent none (a bool is not a count)."""
    return value if isinstance(value, int) and not isinstance(value, bool) else None


def _error_text(obj: Any) -> str:
    """An error chunk's message as the server wrote it, else its start (redacted before it is cut)."""
    msg = (obj.get("message") or obj.get("detail")) if isinstance(obj, dict) else None
    if msg:
        return SECRETS.text(str(msg))
    return SECRETS.clip(json.dumps(obj) if isinstance(obj, dict) else str(obj), 200)


# Keys as orjson writes them (SGLang's compact layout); any other spacing takes the JSON path.
_META_KEY = b'"meta_info":{'
_CT_KEY = b'"completion_tokens":'
_PT_KEY = b'"prompt_tokens":'
_FR_KEY = b'"finish_reason":'
_ABSENT = -1


def _tail_count(payload: bytes, key: bytes, meta: int, last: int) -> int | None:
    """The whole non-negative integer after the last ``key`` in the flat ``meta_info`` tail,
    ``_ABSENT`` when the key is not there, None when its value is anything else (null, a float,
    a sign: json.loads decides those)."""
    at = payload.rfind(key, meta)
    if at < 0:
        return _ABSENT
    at += len(key)
    comma = payload.find(b",", at, last)
    number = payload[at : comma if comma >= 0 else last - 1]
    if not number.isdigit():
        # JSON allows whitespace around a number; int() would also take signs and underscores.
        number = number.strip()
        if not number.isdigit():
            return None
    return int(number)


def _running_counts(payload: bytes, prompt: bool = True) -> tuple[int, int | None] | None:
    """``meta_info``'s (completion_tokens, prompt_tokens or None when absent) of a /generate chunk
    that is neither the last nor an error, read from the bytes; None means "parse the JSON instead".
    ``prompt`` = False leaves prompt_tokens unread (None): once a stream has said it, its later
    chunks repeat it, and the last chunk, parsed whole, says it again for the completeness check.

    /generate chunks repeat the whole text and output_ids so far, so a JSON parse per chunk
    costs O(length) and would dominate the client's CPU. Inside a JSON string every ``"`` is
    escaped, so a quoted name followed by ``:`` is always an object key. The fast path is taken
    only when the chunk ends with its ``meta_info`` object (SGLang's layout) and that object
    is flat (no ``}`` inside it, so its keys are its own; with duplicate keys the last one
    counts, as in json.loads), holds ``"finish_reason"`` as null (so the final chunk, whose
    reason is kept, is parsed), ``"completion_tokens"`` as a whole non-negative integer and
    ``"prompt_tokens"``, if there, as one too, and no ``"error"`` string comes before it. Every
    other chunk, including other whitespace styles, goes through json.loads. The rest of the
    chunk is not validated. One scan covers the text and output_ids (for ``"error"``); the rest
    reads the short tail, with as few calls as it can: in CPython a call costs more than
    scanning a kilobyte.
    """
    last = len(payload) - 1
    if last < 1 or payload[last] != 0x7D:  # '}'
        return None
    meta = payload.rfind(_META_KEY)
    if meta < 0 or payload.find(b"}", meta) != last - 1:
        return None
    fr = payload.rfind(_FR_KEY, meta)
    if fr < 0 or not payload.startswith(b"null", fr + len(_FR_KEY)):
        return None
    ct = _tail_count(payload, _CT_KEY, meta, last)
    pt = _tail_count(payload, _PT_KEY, meta, last) if prompt else _ABSENT
    if ct is None or ct == _ABSENT or pt is None or payload.find(b'"error"', 0, meta) >= 0:
        return None
    return ct, None if pt == _ABSENT else pt


class SGLangBackend(Backend):
    """SGLang's native ``/generate`` with token-id prompts; cumulative ``meta_info.completion_tokens``."""

    name = "sglang"
    path = "/generate"

    def body(self, spec: RequestSpec, max_tokens: int) -> dict[str, Any]:
        return self._merge(
            {
                "input_ids": list(spec.input_ids),
                "sampling_params": {"max_new_tokens": max_tokens, "ignore_eos": self.ignore_eos, "temperature": 0.0},
                "stream": True,
            }
        )

    def feed(self, payload: bytes, state: StreamState) -> int:
        # prompt_tokens until known: 0.7 us a chunk (a third of the fast path) for a number that repeats.
        counts = _running_counts(payload, state.server_prompt_tokens is None)
        if counts is None:
            return self.feed_parsed(json.loads(payload), state)
        ct, pt = counts
        new = ct - (state.server_tokens or 0)
        state.server_tokens = ct
        if pt is not None:
            state.server_prompt_tokens = pt
        if new > 0:
            state.tokens += new
            state.content_chunks += 1
            return new
        return 0

    @staticmethod
    def feed_parsed(obj: Any, state: StreamState) -> int:
        """:meth:`feed` for a chunk already parsed from JSON (any chunk, including the last and errors)."""
        obj = _object(obj, "the chunk")
        if "error" in obj:
            state.error = "error chunk from server: " + _error_text(obj["error"])
            return 0
        meta = _object(obj.get("meta_info"), "meta_info")
        new = 0
        ct = _count(meta.get("completion_tokens"))
        if ct is not None:
            new = ct - (state.server_tokens or 0)
            state.server_tokens = ct
        if (pt := _count(meta.get("prompt_tokens"))) is not None:
            state.server_prompt_tokens = pt
        if ct is None and obj.get("text"):
            # No count from the server: time the chunk as one token, report the total as unknown.
            new = 1
        state.tokens += max(new, 0)
        state.content_chunks += new > 0
        fr = meta.get("finish_reason")
        if fr:
            state.finish_reason = fr.get("type", str(fr)) if isinstance(fr, dict) else str(fr)
            if "output_ids" in obj:
                state.answer = obj
        return max(new, 0)

    def output_sample(self, state: StreamState) -> OutputSample | None:
        """The final chunk's ids and text; None when it carried no output_ids list."""
        answer = state.answer or {}
        ids = answer.get("output_ids")
        if not isinstance(ids, list):
            return None
        text = answer.get("text")
        first = ids[0] if ids else None
        # list.count runs in C: one pass over the ids per request, none per chunk.
        one_id = first if isinstance(first, int) and ids.count(first) == len(ids) else None
        return OutputSample(len(ids), one_id, len(ids), text != "" if isinstance(text, str) else None)

    def kept_answer(self, spec: RequestSpec, state: StreamState) -> KeptAnswer | None:
        """None also where the last chunk's ids are not the whole answer (the server's
        --incremental-streaming-output sends the last delta only)."""
        answer = state.answer or {}
        ids = answer.get("output_ids")
        if (
            not isinstance(ids, list)
            or len(ids) != state.server_tokens
            or not all(type(t) is int and 0 <= t < 2**31 for t in ids)
        ):
            return None
        text = answer.get("text")
        return KeptAnswer(array("i", spec.input_ids), array("i", ids), text if isinstance(text, str) else None)


# Usage on every chunk (SGLang 0.5.x and vLLM honour it; servers that do not just send the
# final usage): a chunk carrying several tokens then counts all of them.
_STREAM_OPTIONS = {"include_usage": True, "continuous_usage_stats": True}


class _OpenAIBackend(Backend):
    """OpenAI streams: token counts from ``usage``, cumulative on every chunk where the server
    sends it so (``continuous_usage_stats``). A content chunk without a count is counted as one
    token and marked a guess; the client spreads the server's final count over such chunks."""

    def feed(self, payload: bytes, state: StreamState) -> int:
        obj = _object(json.loads(payload), "the chunk")
        if "error" in obj:
            state.error = "error chunk from server: " + _error_text(obj["error"])
            return 0
        usage = _object(obj.get("usage"), "usage")
        count = _count(usage.get("completion_tokens"))
        if count is not None:
            state.server_tokens = count
        if (pt := _count(usage.get("prompt_tokens"))) is not None:
            state.server_prompt_tokens = pt
        # Usage-only chunks (vLLM, SGLang) arrive with choices == []: never index blindly.
        choices = obj.get("choices") or []
        if not isinstance(choices, list):
            raise ValueError(f"choices is a {type(choices).__name__}, expected a list")
        content = False
        for choice in (_object(c, "a choice") for c in choices):
            content |= bool(self._content(choice))
            if choice.get("finish_reason"):
                state.finish_reason = choice["finish_reason"]
        if not content:
            return 0
        state.content_chunks += 1
        if count is None:
            state.guessed_chunks += 1
            new = 1
        else:
            new = max(count - state.tokens, 0)
        state.tokens += new
        return new

    @staticmethod
    def _content(choice: Mapping[str, Any]) -> str:
        raise NotImplementedError


class OpenAICompletionsBackend(_OpenAIBackend):
    name = "openai-completions"
    path = "/v1/completions"

    def body(self, spec: RequestSpec, max_tokens: int) -> dict[str, Any]:
        return self._merge(
            {
                "model": self.model,
                "prompt": list(spec.input_ids),
                "max_tokens": max_tokens,
                "temperature": 0.0,
                "ignore_eos": self.ignore_eos,
                "stream": True,
                "stream_options": dict(_STREAM_OPTIONS),
            }
        )

    @staticmethod
    def _content(choice: Mapping[str, Any]) -> str:
        return choice.get("text") or ""


class OpenAIChatBackend(_OpenAIBackend):
    name = "openai-chat"
    path = "/v1/chat/completions"
    prompt_is_ids = False

    def body(self, spec: RequestSpec, max_tokens: int) -> dict[str, Any]:
        body: dict[str, Any] = {
            "model": self.model,
            "messages": spec.messages(),
            "max_tokens": max_tokens,
            "temperature": 0.0,
            "stream": True,
            "stream_options": dict(_STREAM_OPTIONS),
        }
        if self.ignore_eos:
            body["ignore_eos"] = True
        return self._merge(body)

    @staticmethod
    def _content(choice: Mapping[str, Any]) -> str:
        delta = _object(choice.get("delta"), "delta")
        return delta.get("content") or delta.get("reasoning_content") or ""


BACKENDS: dict[str, type[Backend]] = {b.name: b for b in (SGLangBackend, OpenAICompletionsBackend, OpenAIChatBackend)}
