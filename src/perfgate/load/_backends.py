"""How each API is asked for tokens and how its stream is read.

A backend turns a RequestSpec into (path, JSON body) and folds each streamed ``data:`` payload
into a StreamState. It never assumes the requested length: output tokens come from the
server (meta_info / usage) or stay None, and the result says so.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import Any, Mapping

from perfgate.load._dataset import RequestSpec


@dataclass(slots=True)
class StreamState:
    """What has been read so far from one stream."""

    tokens: int = 0
    server_tokens: int | None = None
    finish_reason: str | None = None
    done: bool = False
    error: str = ""


class Backend:
    name = ""
    path = ""

    def __init__(self, model: str, ignore_eos: bool, extra_body: Mapping[str, Any]) -> None:
        self.model = model
        self.ignore_eos = ignore_eos
        self.extra_body = dict(extra_body)

    def body(self, spec: RequestSpec, max_tokens: int) -> dict[str, Any]:
        raise NotImplementedError

    def feed(self, payload: bytes, state: StreamState) -> int:
        """Fold one ``data:`` payload into ``state``; return the number of new tokens it carried."""
        raise NotImplementedError

    def _merge(self, body: dict[str, Any]) -> dict[str, Any]:
        body.update(self.extra_body)
        return body


def _error_text(obj: Any) -> str:
    if isinstance(obj, dict):
        msg = obj.get("message") or obj.get("detail") or json.dumps(obj)[:200]
        return str(msg)
    return str(obj)[:200]


class SGLangBackend(Backend):
    """SGLang's native ``/generate`` with token-id prompts; cumulative ``meta_info.completion_tokens``."""

    name = "sglang"
    path = "/generate"

    def body(self, spec: RequestSpec, max_tokens: int) -> dict[str, Any]:
        return self._merge(
            {
                "input_ids": spec.input_ids,
                "sampling_params": {"max_new_tokens": max_tokens, "ignore_eos": self.ignore_eos, "temperature": 0.0},
                "stream": True,
            }
        )

    def feed(self, payload: bytes, state: StreamState) -> int:
        obj = json.loads(payload)
        if "error" in obj:
            state.error = "error chunk from server: " + _error_text(obj["error"])
            return 0
        meta = obj.get("meta_info") or {}
        new = 0
        ct = meta.get("completion_tokens")
        if isinstance(ct, int):
            new = ct - (state.server_tokens or 0)
            state.server_tokens = ct
        elif obj.get("text"):
            # No count from the server: time the chunk as one token, report the total as unknown.
            new = 1
        state.tokens += max(new, 0)
        fr = meta.get("finish_reason")
        if fr:
            state.finish_reason = fr.get("type", str(fr)) if isinstance(fr, dict) else str(fr)
        return max(new, 0)


class _OpenAIBackend(Backend):
    def feed(self, payload: bytes, state: StreamState) -> int:
        obj = json.loads(payload)
        if "error" in obj:
            state.error = "error chunk from server: " + _error_text(obj["error"])
            return 0
        usage = obj.get("usage")
        if usage and isinstance(usage.get("completion_tokens"), int):
            state.server_tokens = usage["completion_tokens"]
        # Usage-only chunks (vLLM, SGLang) arrive with choices == []: never index blindly.
        choices = obj.get("choices") or ()
        new = 0
        for choice in choices:
            if self._content(choice):
                new += 1
            if choice.get("finish_reason"):
                state.finish_reason = choice["finish_reason"]
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
                "prompt": spec.input_ids,
                "max_tokens": max_tokens,
                "temperature": 0.0,
                "ignore_eos": self.ignore_eos,
                "stream": True,
                "stream_options": {"include_usage": True},
            }
        )

    @staticmethod
    def _content(choice: Mapping[str, Any]) -> str:
        return choice.get("text") or ""


class OpenAIChatBackend(_OpenAIBackend):
    name = "openai-chat"
    path = "/v1/chat/completions"

    def body(self, spec: RequestSpec, max_tokens: int) -> dict[str, Any]:
        body: dict[str, Any] = {
            "model": self.model,
            "messages": [{"role": "user", "content": spec.text()}],
            "max_tokens": max_tokens,
            "temperature": 0.0,
            "stream": True,
            "stream_options": {"include_usage": True},
        }
        if self.ignore_eos:
            body["ignore_eos"] = True
        return self._merge(body)

    @staticmethod
    def _content(choice: Mapping[str, Any]) -> str:
        delta = choice.get("delta") or {}
        return delta.get("content") or delta.get("reasoning_content") or ""


BACKENDS: dict[str, type[Backend]] = {
    b.name: b for b in (SGLangBackend, OpenAICompletionsBackend, OpenAIChatBackend)
}
