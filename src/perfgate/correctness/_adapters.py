"""How each API is asked for greedy tokens with their logprobs, and for the logprobs of given tokens.

- SGLang's native ``/generate``: ``return_logprob``, ``top_logprobs_num``; teacher-forced scoring
  sends ``input_ids = prompt + tokens`` with ``logprob_start_len = len(prompt)`` and one new token,
  and reads ``meta_info.input_token_logprobs`` / ``input_top_logprobs`` ([logprob, id, text] each).
- OpenAI ``/v1/completions`` (vLLM, SGLang): ``logprobs = k`` and, for scoring, ``echo`` with the
  prompt's logprobs; tokens come back named ``token_id:<id>`` (``return_tokens_as_token_ids``).
- OpenAI ``/v1/chat/completions``: ``logprobs`` and ``top_logprobs``; no way to score given
  tokens, so only the positions before a prompt's first divergence are compared there.

Every answer is checked for its shape; anything unexpected is a :class:`CorrectnessError` naming
the route, the prompt and the field, never a KeyError. An answer that lacks what the comparison
needs (fewer tokens than asked for, a position without the top logprobs that tell a wrong token
from the right one) is refused the same way: compared, it would pass on what it left out. A logprob
the server sends as ``null`` where one is due reads as NaN: a degenerate answer, not a parse error.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, replace
from typing import Any, Protocol

import httpx

from perfgate._redact import SECRETS
from perfgate.correctness._spec import TOP_LOGPROBS, Api, Prompt
from perfgate.errors import CorrectnessError


@dataclass(frozen=True)
class Position:
    """One scored token: its logprob, and the server's ``top`` tokens there, most likely first."""

    token: int
    logprob: float
    top: tuple[tuple[int, float], ...] = ()
    # The token as the server's tokenizer spells it (SGLang's return_text_in_logprobs); None: not given.
    text: str | None = None

    @property
    def argmax(self) -> int | None:
        return self.top[0][0] if self.top else None

    def margin(self) -> float | None:
        """How far the most likely token leads the runner-up (nats); None when not known."""
        if len(self.top) < 2:
            return None
        return self.top[0][1] - self.top[1][1]


# How vLLM answers a request whose logprobs are NaN or infinite: HTTP 400 (the server stays up).
_NONFINITE_400 = "Out of range float values are not JSON compliant"


class NonFiniteAnswer(Exception):
    """The server computed NaN or infinite logprobs and refused to serialise them."""


class ProbeClient(Protocol):
    """One server's probe API."""

    api: Api
    can_score: bool
    """Whether :meth:`score` works (teacher forcing); chat cannot."""

    async def generate(self, prompt: Prompt, n: int) -> list[Position]:
        """``n`` greedy tokens (temperature 0, EOS ignored) after ``prompt``."""
        ...

    async def score(self, prompt: Prompt, tokens: Sequence[int]) -> list[Position]:
        """The logprob of each of ``tokens`` given ``prompt`` and the tokens before it."""
        ...

    def peak_in_flight(self) -> int:
        """The most requests sent and not yet answered at once since the last call: the batch the
        server was given (it may run less of it, queueing the rest)."""
        ...

    async def aclose(self) -> None: ...


def _number(value: Any) -> float:
    if value is None:
        return math.nan
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        raise TypeError(f"a logprob must be a number, got {value!r}")
    return float(value)


def _token(value: Any) -> int:
    """A token id, or the ``token_id:<id>`` name vLLM's return_tokens_as_token_ids gives."""
    if isinstance(value, int) and not isinstance(value, bool):
        return value
    if isinstance(value, str) and value.startswith("token_id:"):
        try:
            return int(value.removeprefix("token_id:"))
        except ValueError:
            pass
    raise TypeError(
        f"expected a token id (or 'token_id:<id>'), got {value!r}: the server names tokens by their text; "
        "it must honour return_tokens_as_token_ids"
    )


def _list(value: Any, what: str) -> list[Any]:
    if not isinstance(value, list):
        raise TypeError(f"{what} must be a list, got {type(value).__name__}")
    return value


# Requests one httpx client carries at once. httpcore's pool scans all its connections for every
# request and answer: one client of 1024 connections (a pass padded to the load's 1024) spent 58 s
# of the probe's CPU there, measured; clients of 32 keep that linear in the requests.
_PER_CLIENT = 32


class _Http:
    def __init__(self, base_url: str, headers: Mapping[str, str], timeout_s: float) -> None:
        self._headers = dict(headers)
        self.base_url = base_url.rstrip("/")
        self._timeout_s = timeout_s
        # One TLS context for all the clients: each would load the CA store again (~30 ms).
        self._ssl = httpx.create_ssl_context()
        self._clients: list[httpx.AsyncClient] = []
        self._busy: list[int] = []
        self._at_server = 0
        self._peak = 0

    def peak_in_flight(self) -> int:
        self._peak, peak = self._at_server, self._peak
        return peak

    def _take(self) -> int:
        """A client with room for one more request (a new one when all are full): its index."""
        k = next((k for k, n in enumerate(self._busy) if n < _PER_CLIENT), len(self._clients))
        if k == len(self._clients):
            limits = httpx.Limits(max_connections=_PER_CLIENT)
            self._clients.append(
                httpx.AsyncClient(headers=self._headers, timeout=self._timeout_s, verify=self._ssl, limits=limits)
            )
            self._busy.append(0)
        self._busy[k] += 1
        return k

    async def post(self, path: str, body: dict[str, Any], prompt: Prompt) -> dict[str, Any]:
        url = self.base_url + path
        k = self._take()
        sent = False

        async def trace(event: str, info: Any) -> None:
            # Counted once the request is on the wire, not when it is handed to the client: a slow
            # client that gets the first answers back before it sent the last must not claim the batch.
            nonlocal sent
            if event == "http11.send_request_body.complete":
                sent = True
                self._at_server += 1
                self._peak = max(self._peak, self._at_server)

        try:
            r = await self._clients[k].post(url, json=body, extensions={"trace": trace})
        except httpx.HTTPError as e:
            raise CorrectnessError(f"correctness probe: {path} for prompt {prompt.index} failed: {e!r}") from None
        finally:
            self._busy[k] -= 1
            self._at_server -= sent
        if r.status_code == 400 and _NONFINITE_400 in r.text:
            raise NonFiniteAnswer(SECRETS.clip(r.text, 300))
        if r.status_code != 200:
            raise CorrectnessError(
                f"correctness probe: {path} answered HTTP {r.status_code} for prompt {prompt.index}: "
                f"{SECRETS.clip(r.text, 300)!r}; the server must return logprobs for the probe ([correctness] api, or "
                "enabled = false with a reason)"
            )
        try:
            data = r.json()
        except ValueError as e:
            raise CorrectnessError(
                f"correctness probe: {path} answer for prompt {prompt.index} is not JSON ({e})"
            ) from None
        if not isinstance(data, dict):
            raise CorrectnessError(f"correctness probe: {path} answer for prompt {prompt.index} is not a JSON object")
        return data

    async def aclose(self) -> None:
        for client in self._clients:
            await client.aclose()


def _whole(positions: list[Position], n: int, path: str, prompt: Prompt, top_field: str) -> list[Position]:
    """``positions`` when they are the ``n`` asked for, each with the top logprobs asked for."""
    if len(positions) != n:
        raise CorrectnessError(
            f"correctness probe: {path} gave {len(positions)} tokens for prompt {prompt.index}, asked for {n} "
            "(ignore_eos must be honoured): a cut answer cannot be compared"
        )
    missing = [i for i, p in enumerate(positions) if not p.top]
    if missing:
        raise CorrectnessError(
            f"correctness probe: {path} gave no top logprobs ({top_field}) for prompt {prompt.index} at "
            f"{len(missing)} of {n} positions, first at position {missing[0]}: without them a wrong token cannot "
            "be told from the right one"
        )
    return positions


def _shape_error(path: str, prompt: Prompt, e: Exception) -> CorrectnessError:
    what = f"missing field {e}" if isinstance(e, KeyError) else str(e)
    return CorrectnessError(
        f"correctness probe: cannot read the {path} answer for prompt {prompt.index} ({what}); see "
        "docs/correctness.md for the answer shapes the probe reads"
    )


class SGLangClient(_Http):
    """SGLang's native ``/generate``."""

    api: Api = "sglang"
    can_score = True
    _PATH = "/generate"

    @staticmethod
    def _positions(entries: list[Any], tops: list[Any] | None) -> list[Position]:
        out = []
        for i, entry in enumerate(entries):
            e = _list(entry, f"logprob entry {i}")
            if len(e) < 2:
                raise ValueError(f"logprob entry {i} must be [logprob, token id, text], got {e!r}")
            top: tuple[tuple[int, float], ...] = ()
            if tops is not None and i < len(tops) and tops[i] is not None:
                top = tuple((_token(t[1]), _number(t[0])) for t in _list(tops[i], f"top logprobs {i}"))
            text = e[2] if len(e) > 2 and isinstance(e[2], str) else None
            out.append(Position(_token(e[1]), _number(e[0]), top, text))
        return out

    async def generate(self, prompt: Prompt, n: int) -> list[Position]:
        body = {
            "input_ids": list(prompt.ids),
            "sampling_params": {"temperature": 0.0, "max_new_tokens": n, "ignore_eos": True},
            "return_logprob": True,
            "top_logprobs_num": TOP_LOGPROBS,
            "logprob_start_len": -1,
            "stream": False,
        }
        data = await self.post(self._PATH, body, prompt)
        try:
            meta = data["meta_info"]
            entries = _list(meta["output_token_logprobs"], "meta_info.output_token_logprobs")
            positions = self._positions(entries, meta.get("output_top_logprobs"))
            ids = data.get("output_ids")
            if ids is not None and [_token(t) for t in _list(ids, "output_ids")] != [p.token for p in positions]:
                raise ValueError("output_ids and output_token_logprobs name different tokens")
        except (KeyError, TypeError, ValueError) as e:
            raise _shape_error(self._PATH, prompt, e) from None
        return _whole(positions, n, self._PATH, prompt, "meta_info.output_top_logprobs")

    async def score(self, prompt: Prompt, tokens: Sequence[int]) -> list[Position]:
        ids = [*prompt.ids, *tokens]
        body = {
            "input_ids": ids,
            "sampling_params": {"temperature": 0.0, "max_new_tokens": 1, "ignore_eos": True},
            "return_logprob": True,
            "top_logprobs_num": 1,
            # From the prompt's last token: whether a server's first scored entry is the one at the
            # offset (and whether it has a logprob) differs; _tail takes the tokens' own entries.
            "logprob_start_len": max(0, len(prompt.ids) - 1),
            # Each token's text, as the tokenizer spells it: a streamed answer's text must hold it.
            "return_text_in_logprobs": True,
            "stream": False,
        }
        data = await self.post(self._PATH, body, prompt)
        try:
            meta = data["meta_info"]
            entries = _list(meta["input_token_logprobs"], "meta_info.input_token_logprobs")
            tops = meta.get("input_top_logprobs")
            positions = self._positions(entries, _list(tops, "input_top_logprobs") if tops is not None else None)
        except (KeyError, TypeError, ValueError) as e:
            raise _shape_error(self._PATH, prompt, e) from None
        got = _tail(positions, tokens, self._PATH, prompt, zeroes_one_id=True)
        return _whole(got, len(tokens), self._PATH, prompt, "meta_info.input_top_logprobs")


def _tail(
    positions: list[Position], tokens: Sequence[int], path: str, prompt: Prompt, *, zeroes_one_id: bool = False
) -> list[Position]:
    """The positions of ``tokens`` at the end of ``positions`` (servers differ on whether the first
    scored position is the one at the start offset or the one after it): their ids must match.

    ``zeroes_one_id``: SGLang (0.5.12 to 0.5.17 at least) reports the vocabulary's last id as 0 in
    ``input_token_logprobs`` (``x if x < vocab_size - 1 else 0``, meant to clip image hashes), while
    its logprob is that token's. So a 0 where one and the same id was sent at every such position
    is that id; any other difference is a server that scored something else.
    """
    n = len(tokens)
    got = positions[-n:] if n else []
    if len(got) == n:
        wrong = [i for i, (p, t) in enumerate(zip(got, tokens, strict=True)) if p.token != t]
        if zeroes_one_id and wrong and all(got[i].token == 0 for i in wrong) and len({tokens[i] for i in wrong}) == 1:
            got = [replace(p, token=tokens[i]) if i in wrong else p for i, p in enumerate(got)]
            wrong = []
        if not wrong:
            return got
        i = wrong[0]
        detail = f"; first at output position {i}: sent {tokens[i]}, scored {got[i].token} ({len(wrong)} of {n} differ)"
    else:
        detail = ""
    raise CorrectnessError(
        f"correctness probe: {path} scored other tokens than it was sent for prompt {prompt.index} "
        f"({len(positions)} positions; the last {n} should be the reference's output{detail}): the server does "
        "not score prompt tokens as the probe asks"
    )


class _OpenAIHttp(_Http):
    """The OpenAI APIs name the served model in every request."""

    def __init__(self, base_url: str, model: str, headers: Mapping[str, str], timeout_s: float) -> None:
        super().__init__(base_url, headers, timeout_s)
        self.model = model


class CompletionsClient(_OpenAIHttp):
    """OpenAI ``/v1/completions`` with token-id prompts."""

    api: Api = "openai-completions"
    can_score = True
    _PATH = "/v1/completions"

    @staticmethod
    def _positions(logprobs: Any) -> list[Position]:
        if not isinstance(logprobs, dict):
            raise TypeError("choices[0].logprobs must be an object")
        tokens = _list(logprobs["tokens"], "logprobs.tokens")
        values = _list(logprobs["token_logprobs"], "logprobs.token_logprobs")
        tops = logprobs.get("top_logprobs")
        if len(values) != len(tokens):
            raise ValueError("logprobs.tokens and logprobs.token_logprobs differ in length")
        out = []
        for i, (t, lp) in enumerate(zip(tokens, values, strict=True)):
            top: tuple[tuple[int, float], ...] = ()
            if isinstance(tops, list) and i < len(tops) and isinstance(tops[i], dict):
                ranked = sorted(((_token(k), _number(v)) for k, v in tops[i].items()), key=lambda x: -x[1])
                top = tuple(ranked)
            out.append(Position(_token(t), _number(lp), top))
        return out

    def _body(self, prompt: list[int], n: int, top: int, echo: bool) -> dict[str, Any]:
        return {
            "model": self.model,
            "prompt": prompt,
            "max_tokens": n,
            "temperature": 0.0,
            "logprobs": top,
            "echo": echo,
            "ignore_eos": True,
            "return_tokens_as_token_ids": True,
            "stream": False,
        }

    async def _choice_logprobs(self, body: dict[str, Any], prompt: Prompt) -> list[Position]:
        data = await self.post(self._PATH, body, prompt)
        try:
            choices = _list(data["choices"], "choices")
            if not choices or not isinstance(choices[0], dict):
                raise ValueError("choices is empty")
            return self._positions(choices[0]["logprobs"])
        except (KeyError, TypeError, ValueError) as e:
            raise _shape_error(self._PATH, prompt, e) from None

    async def generate(self, prompt: Prompt, n: int) -> list[Position]:
        positions = await self._choice_logprobs(self._body(list(prompt.ids), n, TOP_LOGPROBS, False), prompt)
        return _whole(positions, n, self._PATH, prompt, "choices[0].logprobs.top_logprobs")

    async def score(self, prompt: Prompt, tokens: Sequence[int]) -> list[Position]:
        ids = [*prompt.ids, *tokens]
        positions = await self._choice_logprobs(self._body(ids, 1, 1, True), prompt)
        # Echoed: the prompt, the given tokens, then the one generated token.
        got = _tail(positions[: len(ids)], tokens, self._PATH, prompt)
        return _whole(got, len(tokens), self._PATH, prompt, "choices[0].logprobs.top_logprobs")


class ChatClient(_OpenAIHttp):
    """OpenAI ``/v1/chat/completions``: greedy tokens and their logprobs only."""

    api: Api = "openai-chat"
    can_score = False
    _PATH = "/v1/chat/completions"

    async def generate(self, prompt: Prompt, n: int) -> list[Position]:
        body = {
            "model": self.model,
            "messages": [{"role": "user", "content": prompt.text}],
            "max_tokens": n,
            "temperature": 0.0,
            "logprobs": True,
            "top_logprobs": TOP_LOGPROBS,
            "ignore_eos": True,
            "return_tokens_as_token_ids": True,
            "stream": False,
        }
        data = await self.post(self._PATH, body, prompt)
        try:
            choice = _list(data["choices"], "choices")[0]
            content = _list(choice["logprobs"]["content"], "choices[0].logprobs.content")
            out = []
            for entry in content:
                top = tuple(
                    (_token(t["token"]), _number(t["logprob"])) for t in _list(entry.get("top_logprobs", []), "top")
                )
                out.append(Position(_token(entry["token"]), _number(entry["logprob"]), top))
        except (KeyError, IndexError, TypeError, ValueError) as e:
            raise _shape_error(self._PATH, prompt, e) from None
        return _whole(out, n, self._PATH, prompt, "choices[0].logprobs.content[].top_logprobs")

    async def score(self, prompt: Prompt, tokens: Sequence[int]) -> list[Position]:
        raise CorrectnessError("correctness probe: the chat API cannot score given tokens")


def open_client(
    api: Api, base_url: str, *, model: str, headers: Mapping[str, str] | None = None, timeout_s: float = 120.0
) -> ProbeClient:
    """The probe client for ``api`` at ``base_url`` (``model``: the served name, for the OpenAI APIs;
    ``headers``: the server's bearer token, ``RunningServer.headers()``)."""
    sent = headers or {}
    if api == "sglang":
        return SGLangClient(base_url, sent, timeout_s)
    if api == "openai-completions":
        return CompletionsClient(base_url, model, sent, timeout_s)
    return ChatClient(base_url, model, sent, timeout_s)
