"""The server's own tokenizer, asked over HTTP, for datasets of text (``tokenize = "server"``).

SGLang answers ``POST /v1/tokenize`` (alias ``/tokenize``) with ``{"prompt": [text, ...]}`` in one
request, ``{"tokens": [[id, ...], ...], "count": [...]}``; vLLM's ``/tokenize`` takes one string
at a time. Both count a prompt as a generation request's text is counted, special tokens (BOS)
included, which is also how bench_serving counts ShareGPT lengths with the model's tokenizer.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import httpx

from perfgate._redact import SECRETS
from perfgate.errors import LoadError

# Texts per /v1/tokenize request: large enough to amortise the round trip, small enough that
# one answer stays a few MB.
_BATCH = 256
_TIMEOUT_S = 60.0
# Answers meaning "this route or this shape is not served here": try the one-text route.
_NOT_HERE = (400, 404, 405, 422)


@dataclass(frozen=True)
class ServerTokenizer:
    """Calls the server at ``base_url`` to tokenize text (picklable: each client process makes its own calls).

    ``headers``: the requests' own (the bearer token); ``model``: the model name requests carry.
    """

    base_url: str
    headers: tuple[tuple[str, str], ...] = ()
    model: str = ""

    def __call__(self, texts: Sequence[str]) -> list[list[int]]:
        """The token ids of each text, in order; LoadError naming the server's answer when it cannot tell."""
        out: list[list[int]] = []
        with httpx.Client(headers=dict(self.headers), timeout=_TIMEOUT_S) as client:
            for start in range(0, len(texts), _BATCH):
                out += self._batch(client, list(texts[start : start + _BATCH]))
        return out

    def _batch(self, client: httpx.Client, texts: list[str]) -> list[list[int]]:
        answer = self._post(client, "/v1/tokenize", texts)
        if answer.status_code == 200:
            return self._ids(answer, "/v1/tokenize", len(texts))
        if answer.status_code not in _NOT_HERE:
            raise self._error("/v1/tokenize", answer)
        one_by_one = []
        for text in texts:
            single = self._post(client, "/tokenize", text)
            if single.status_code != 200:
                raise self._error("/tokenize", single, first=answer)
            one_by_one += self._ids(single, "/tokenize", 1)
        return one_by_one

    def _post(self, client: httpx.Client, path: str, prompt: str | list[str]) -> httpx.Response:
        body: dict[str, Any] = {"prompt": prompt, "add_special_tokens": True}
        if self.model:
            body["model"] = self.model
        url = self.base_url.rstrip("/") + path
        try:
            return client.post(url, json=body)
        except httpx.HTTPError as e:
            raise LoadError(f'tokenize = "server": cannot reach {url}: {e}') from None

    def _ids(self, answer: httpx.Response, path: str, n: int) -> list[list[int]]:
        try:
            tokens = answer.json()["tokens"]
        except (ValueError, KeyError, TypeError):
            tokens = None
        batch = [tokens] if n == 1 and isinstance(tokens, list) and all(isinstance(t, int) for t in tokens) else tokens
        if (
            not isinstance(batch, list)
            or len(batch) != n
            or not all(isinstance(ids, list) and all(isinstance(t, int) for t in ids) for ids in batch)
        ):
            raise LoadError(
                f'tokenize = "server": {self.base_url}{path} answered 200 without {n} lists of token ids '
                f'under "tokens": {SECRETS.clip(answer.text, 200)!r}'
            )
        return batch

    def _error(self, path: str, answer: httpx.Response, first: httpx.Response | None = None) -> LoadError:
        tried = f"/v1/tokenize answered {first.status_code}, then " if first is not None else ""
        return LoadError(
            f'tokenize = "server": {self.base_url}: {tried}{path} answered {answer.status_code} '
            f"{SECRETS.clip(answer.text, 200)!r}; the server cannot count tokens for perfgate: "
            'use tokenize = "approximate"'
        )
