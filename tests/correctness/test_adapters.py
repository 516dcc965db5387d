"""Each API's answers, as the real servers give them (shapes from SGLang 0.5.23 and vLLM 0.32 on CPU,
see docs/correctness.md), and every answer the probe cannot read: one CorrectnessError naming the
route, the prompt and the field. Real HTTP on 127.0.0.1."""

from __future__ import annotations

import asyncio
import http.server
import json
import math
from typing import Any, ClassVar

import pytest

from perfgate._redact import MIN_PIECE_CHARS, SECRETS
from perfgate.correctness import Position, Prompt, open_client
from perfgate.correctness._adapters import NonFiniteAnswer
from perfgate.errors import CorrectnessError
from tests.support import loopback_http

PROMPT = Prompt(3, (10, 11, 12), "a b c")
TOPS = ((11, -1.0), (12, -2.0), (25, -7.52), (640, -7.51), (7, -7.0))


class _Canned(http.server.BaseHTTPRequestHandler):
    """Answers every POST with ``status`` and ``body``; keeps the last request body."""

    status: ClassVar[int] = 200
    body: ClassVar[Any] = {}
    seen: ClassVar[list[dict[str, Any]]] = []

    def do_POST(self) -> None:
        length = int(self.headers.get("Content-Length", 0))
        type(self).seen.append(json.loads(self.rfile.read(length)))
        raw = self.body if isinstance(self.body, bytes) else json.dumps(self.body).encode()
        self.send_response(self.status)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(raw)))
        self.end_headers()
        self.wfile.write(raw)

    def log_message(self, *args: object) -> None:
        pass


def _call(api: str, method: str, status: int, body: Any, *tokens: int) -> tuple[list[Position], dict[str, Any]]:
    handler = type("H", (_Canned,), {"status": status, "body": body, "seen": []})

    async def go(url: str) -> list[Position]:
        client = open_client(api, url, model="tiny")  # type: ignore[arg-type]
        try:
            if method == "generate":
                return await client.generate(PROMPT, len(tokens) or 2)
            return await client.score(PROMPT, tokens)
        finally:
            await client.aclose()

    with loopback_http(handler) as server:
        out = asyncio.run(go(f"http://127.0.0.1:{server.server_address[1]}"))
    return out, handler.seen[-1]


def test_sglang_greedy_and_teacher_forced() -> None:
    greedy = {
        "output_ids": [25, 640],
        "meta_info": {
            "output_token_logprobs": [[-7.52, 25, None], [-7.51, 640, None]],
            "output_top_logprobs": [[[-7.52, 25, None], [-7.6, 3, None]], [[-7.51, 640, None], [-7.9, 4, None]]],
        },
    }
    out, sent = _call("sglang", "generate", 200, greedy)
    assert [p.token for p in out] == [25, 640] and out[0].margin() == pytest.approx(0.08)
    assert sent["return_logprob"] is True and sent["sampling_params"]["temperature"] == 0
    # The entry at logprob_start_len has no logprob (SGLang): the tokens' own entries follow it.
    scored = {
        "meta_info": {
            "input_token_logprobs": [[None, 12, None], [-7.52, 25, None], [-7.51, 640, None]],
            "input_top_logprobs": [None, [[-7.52, 25, None]], [[-7.4, 9, None]]],
        }
    }
    out, sent = _call("sglang", "score", 200, scored, 25, 640)
    assert sent["logprob_start_len"] == 2 and sent["input_ids"] == [10, 11, 12, 25, 640]
    assert [(p.token, p.logprob, p.argmax) for p in out] == [(25, -7.52, 25), (640, -7.51, 9)]


def test_sglang_null_logprobs_read_as_nan() -> None:
    # The NaN model: HTTP 200, every logprob null, every token 0.
    entry = [None, 0, None]
    meta = {"output_token_logprobs": [entry, entry], "output_top_logprobs": [[entry], [entry]]}
    body = {"output_ids": [0, 0], "meta_info": meta}
    out, _ = _call("sglang", "generate", 200, body)
    assert all(math.isnan(p.logprob) for p in out)


def test_openai_completions_greedy_and_echo() -> None:
    greedy = {
        "choices": [
            {
                "logprobs": {
                    "tokens": ["token_id:25", "token_id:640"],
                    "token_logprobs": [-7.52, -7.51],
                    "top_logprobs": [{"token_id:25": -7.52, "token_id:3": -7.9}, {"token_id:640": -7.51}],
                }
            }
        ]
    }
    out, sent = _call("openai-completions", "generate", 200, greedy)
    assert [p.token for p in out] == [25, 640] and out[0].argmax == 25
    assert sent["return_tokens_as_token_ids"] is True and sent["prompt"] == [10, 11, 12]
    echoed = {
        "choices": [
            {
                "logprobs": {
                    "tokens": [f"token_id:{t}" for t in (10, 11, 12, 25, 640, 7)],
                    "token_logprobs": [None, -1.0, -2.0, -7.52, -7.51, -7.0],
                    "top_logprobs": [None, *({f"token_id:{t}": lp} for t, lp in TOPS)],
                }
            }
        ]
    }
    out, sent = _call("openai-completions", "score", 200, echoed, 25, 640)
    assert sent["echo"] is True and sent["max_tokens"] == 1
    assert [(p.token, p.logprob) for p in out] == [(25, -7.52), (640, -7.51)]


def test_vllm_refusing_nan_logprobs_is_a_non_finite_answer() -> None:
    body = {"error": {"message": "Out of range float values are not JSON compliant", "code": 400}}
    with pytest.raises(NonFiniteAnswer):
        _call("openai-completions", "generate", 400, body)


@pytest.mark.parametrize(
    ("api", "status", "body", "message"),
    [
        ("sglang", 500, {"error": "boom"}, "/generate answered HTTP 500 for prompt 3"),
        ("sglang", 200, b"not json", "/generate answer for prompt 3 is not JSON"),
        ("sglang", 200, [1, 2], "is not a JSON object"),
        ("sglang", 200, {"output_ids": [1, 2]}, "missing field 'meta_info'"),
        ("sglang", 200, {"meta_info": {"output_token_logprobs": "x"}}, "must be a list"),
        ("sglang", 200, {"meta_info": {"output_token_logprobs": [[-1.0]]}}, "must be [logprob, token id, text]"),
        ("sglang", 200, {"meta_info": {"output_token_logprobs": [["a", 1, None]]}}, "a logprob must be a number"),
        (
            "sglang",
            200,
            {"output_ids": [9, 9], "meta_info": {"output_token_logprobs": [[-1.0, 1, None], [-1.0, 2, None]]}},
            "output_ids and output_token_logprobs name different tokens",
        ),
        (
            "openai-completions",
            200,
            {"choices": [{"logprobs": {"tokens": ["hello", "x"], "token_logprobs": [-1.0, -1.0]}}]},
            "return_tokens_as_token_ids",
        ),
        ("openai-completions", 200, {"choices": []}, "choices is empty"),
        (
            "openai-completions",
            200,
            {"choices": [{"logprobs": {"tokens": ["token_id:1"], "token_logprobs": [-1.0]}}]},
            "gave 1 tokens for prompt 3, asked for 2",
        ),
        ("openai-chat", 200, {"choices": [{"logprobs": None}]}, "cannot read the /v1/chat/completions answer"),
    ],
)
def test_unreadable_answers_name_route_prompt_and_field(api: str, status: int, body: Any, message: str) -> None:
    with pytest.raises(CorrectnessError, match="correctness probe: ") as err:
        _call(api, "generate", status, body)
    assert message in str(err.value)


def test_a_server_that_scores_other_tokens_is_refused() -> None:
    scored = {"meta_info": {"input_token_logprobs": [[None, 12, None], [-1.0, 99, None], [-1.0, 640, None]]}}
    with pytest.raises(
        CorrectnessError,
        match=r"scored other tokens than it was sent for prompt 3 \(3 positions; the last 2 should be the "
        r"reference's output; first at output position 0: sent 25, scored 99 \(1 of 2 differ\)\)",
    ):
        _call("sglang", "score", 200, scored, 25, 640)


def _scored(*ids: int) -> dict[str, Any]:
    entries = [[None, 12, None], *([-1.5, i, None] for i in ids)]
    return {"meta_info": {"input_token_logprobs": entries, "input_top_logprobs": [None, *([e] for e in entries[1:])]}}


def test_sglangs_zero_for_the_vocabularys_last_id_is_that_id() -> None:
    # SGLang 0.5.17 on the H200: the greedy output held id 2047 of a 2048-token vocabulary, and
    # input_token_logprobs reported it as 0 (twice here): the logprob is still 2047's.
    positions, _ = _call("sglang", "score", 200, _scored(25, 0, 640, 0), 25, 2047, 640, 2047)
    assert [p.token for p in positions] == [25, 2047, 640, 2047]
    assert [p.logprob for p in positions] == [-1.5] * 4


@pytest.mark.parametrize(
    ("api", "body", "first"),
    [
        # Zeros for two different ids: not the clip, a server that scored something else.
        ("sglang", _scored(0, 0), "first at output position 0: sent 25, scored 0 (2 of 2 differ)"),
        # A zero and another id.
        ("sglang", _scored(0, 7), "first at output position 0: sent 25, scored 0 (2 of 2 differ)"),
    ],
)
def test_zeros_that_are_not_sglangs_clip_are_refused(api: str, body: dict[str, Any], first: str) -> None:
    with pytest.raises(CorrectnessError) as err:
        _call(api, "score", 200, body, 25, 640)
    assert first in str(err.value)


def test_an_error_answer_quoting_a_key_past_the_cut_shows_none_of_it() -> None:
    # The probe quotes 300 characters of an error answer: the key at 260 is redacted before the cut.
    key = "sk-probe-" + "4f1c2a9e8b7d6c5a4f1c2a9e8b7d6c5a"
    SECRETS.add(key)
    with pytest.raises(CorrectnessError) as err:
        _call("sglang", "generate", 401, ("x" * 260 + f"bad key {key}").encode())
    assert key[:MIN_PIECE_CHARS] not in str(err.value) and "<redacted>" in str(err.value)


GREEDY_64: dict[str, Any] = {
    "output_ids": [25] * 64,
    "meta_info": {
        "output_token_logprobs": [[-1.0, 25, None]] * 64,
        "output_top_logprobs": [[[-1.0, 25, None], [-2.0, 3, None]]] * 64,
    },
}


def _cut(n: int) -> dict[str, Any]:
    meta = GREEDY_64["meta_info"]
    return {
        "output_ids": [25] * n,
        "meta_info": {k: v[:n] for k, v in meta.items()},
    }


def _without(field: str, body: dict[str, Any]) -> dict[str, Any]:
    return {**body, "meta_info": {k: v for k, v in body["meta_info"].items() if k != field}}


@pytest.mark.parametrize(
    ("method", "body", "message"),
    [
        # Issue #34: an SGLang greedy answer cut to 0 or 8 of 64 tokens passed (OpenAI's was refused).
        ("generate", _cut(0), "/generate gave 0 tokens for prompt 3, asked for 64"),
        ("generate", _cut(8), "/generate gave 8 tokens for prompt 3, asked for 64"),
        # ... and with output_top_logprobs dropped, wrong tokens were not seen.
        (
            "generate",
            _without("output_top_logprobs", GREEDY_64),
            "/generate gave no top logprobs (meta_info.output_top_logprobs) for prompt 3 at 64 of 64 positions, "
            "first at position 0",
        ),
        (
            "score",
            _without("input_top_logprobs", _scored(25, 640)),
            "/generate gave no top logprobs (meta_info.input_top_logprobs) for prompt 3 at 2 of 2 positions",
        ),
    ],
)
def test_an_answer_lacking_what_the_comparison_needs_is_refused(
    method: str, body: dict[str, Any], message: str
) -> None:
    tokens = (25, 640) if method == "score" else (25,) * 64
    with pytest.raises(CorrectnessError, match=r"^correctness probe: ") as err:
        _call("sglang", method, 200, body, *tokens)
    assert message in str(err.value)


def test_a_chat_answer_without_top_logprobs_is_refused() -> None:
    entry = {"token": "token_id:25", "logprob": -1.0}
    body = {"choices": [{"logprobs": {"content": [entry, {**entry, "top_logprobs": []}]}}]}
    with pytest.raises(CorrectnessError, match=r"no top logprobs .* for prompt 3 at 2 of 2 positions"):
        _call("openai-chat", "generate", 200, body)
