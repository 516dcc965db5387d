"""Routes: SGLang's native and OpenAI-compatible endpoints, plus /dcgm/metrics and /sim/truth."""

from __future__ import annotations

import asyncio
import json
import os
import re
import sys
import time
import traceback
import zlib
from pathlib import Path
from typing import Any

from aiohttp import web

from perfgate.sim._gpus import render_dcgm
from perfgate.sim._metrics import render_metrics
from perfgate.sim._server import (
    CHAT_TOKENS_PER_MESSAGE,
    CHAT_TOKENS_PER_PROMPT,
    JSON_DUMPS,
    VERSION,
    ChatReq,
    CompletionReq,
    GenerateReq,
    LogprobAsk,
    Req,
    SimServer,
    log,
    plan_faults,
)
from perfgate.sim._telemetry_faults import HANG_AFTER_SCRAPES

PROFILE_ID = re.compile(r"[A-Za-z0-9._-]{1,100}")
_SERVER: web.AppKey[SimServer] = web.AppKey("sim", SimServer)


class _BadRequest(Exception):
    """A request the simulator refuses with HTTP 400, as SGLang would."""


def _json(body: object, status: int = 200) -> web.Response:
    return web.json_response(body, status=status, dumps=JSON_DUMPS)


def _error_400(message: str, openai: bool) -> web.Response:
    """OpenAI routes answer an ErrorResponse; native routes ``{"error": {"message": ...}}``."""
    if openai:
        return _json(
            {"object": "error", "message": message, "type": "BadRequestError", "param": None, "code": 400}, status=400
        )
    return _json({"error": {"message": message}}, status=400)


def _int_field(obj: dict[str, Any], key: str, default: int | None, low: int) -> int | None:
    value = obj.get(key, default)
    if value is None:
        return None
    if isinstance(value, bool) or not isinstance(value, int):
        raise _BadRequest(f"{key} must be an integer, got {value!r}")
    if value < low:
        raise _BadRequest(f"{key} must be >= {low}, got {value}")
    return value


def _srv(request: web.Request) -> SimServer:
    return request.app[_SERVER]


async def _read_json(request: web.Request) -> dict[str, Any]:
    try:
        body = await request.json(loads=json.loads)
    except (json.JSONDecodeError, UnicodeDecodeError) as err:
        raise _BadRequest(f"The request body is not valid JSON: {err}") from None
    if not isinstance(body, dict):
        raise _BadRequest("The request body must be a JSON object.")
    return body


# -- health and info -----------------------------------------------------------------
async def health(request: web.Request) -> web.Response:
    return web.Response(status=200 if _srv(request).ready else 503)


async def model_info(request: web.Request) -> web.Response:
    opts = _srv(request).opts
    return _json(
        {
            "model_path": opts.model_path,
            "served_model_name": opts.served_model_name,
            "tokenizer_path": opts.model_path,
            "is_generation": True,
            "preferred_sampling_params": None,
            "weight_version": "default",
            "load_format": "auto",
            "reasoning_parser": None,
            "tool_call_parser": None,
            "disaggregation_mode": "null",
            "has_image_understanding": False,
            "has_audio_understanding": False,
            "model_type": "glm_moe_dsa",
            "architectures": ["GlmMoeDsaForCausalLM"],
        }
    )


async def server_info(request: web.Request) -> web.Response:
    srv = _srv(request)
    opts = srv.opts
    return _json(
        {
            "model_path": opts.model_path,
            "tokenizer_path": opts.model_path,
            "served_model_name": opts.served_model_name,
            "host": opts.host,
            "port": opts.port,
            "tp_size": opts.gpus,
            "dp_size": 1,
            "pp_size": 1,
            "ep_size": 1,
            "max_running_requests": opts.max_running_requests,
            "chunked_prefill_size": opts.chunked_prefill_size,
            "max_total_tokens": opts.max_total_tokens,
            "context_length": opts.max_total_tokens,
            "stream_interval": opts.stream_interval,
            "quantization": "modelopt_fp4",
            "kv_cache_dtype": "auto",
            "moe_runner_backend": "flashinfer_cutlass",
            "attention_backend": "flashinfer",
            "disable_radix_cache": opts.disable_radix_cache,
            "disable_cuda_graph": False,
            "enable_metrics": True,
            "random_seed": opts.seed,
            "launch_command": " ".join([sys.executable, "-m", "perfgate.sim", *sys.argv[1:]]),
            "max_total_num_tokens": opts.max_total_tokens,
            "startup_time": srv.startup_time,
            "internal_states": [
                {
                    "last_gen_throughput": srv.gauges()["sglang:gen_throughput"],
                    "num_running_reqs": srv.engine.num_running,
                    "num_waiting_reqs": srv.engine.num_waiting,
                }
            ],
            "version": opts.version or VERSION,
            "frontend": "python",
            "perfgate_sim": {
                "options": opts.as_dict(),
                "slowdown": opts.slowdown,
                "gpus": [g.as_dict() for g in srv.gpus],
            },
        }
    )


async def models(request: web.Request) -> web.Response:
    opts = _srv(request).opts
    card = {
        "id": opts.served_model_name,
        "object": "model",
        "created": int(time.time()),
        "owned_by": "sglang",
        "root": opts.served_model_name,
        "parent": None,
        "max_model_len": opts.max_total_tokens,
    }
    return _json({"object": "list", "data": [card]})


async def flush_cache(request: web.Request) -> web.Response:
    srv = _srv(request)
    try:
        timeout_s = float(request.query.get("timeout", "0"))
    except ValueError:
        timeout_s = -1.0
    if not timeout_s >= 0:
        return _error_400("timeout must be a number >= 0", openai=False)
    if srv.engine.idle() or (timeout_s > 0 and await srv.wait_idle(timeout_s)):
        srv.engine.flush_cache()
        return web.Response(
            text=(
                "Cache flushed.\nPlease check backend logs for more details. (When there are running or "
                "waiting requests, the operation will not be performed.)\n"
            )
        )
    return web.Response(status=400, text="Flush cache failed: there are running or waiting requests.\n")


async def start_profile(request: web.Request) -> web.Response:
    """SGLang's /start_profile: with ``num_steps`` it answers once those steps ran and the trace is written."""
    srv = _srv(request)
    try:
        body = await _read_json(request) if request.can_read_body else {}
        num_steps = _int_field(body, "num_steps", None, 1)
        output_dir = body.get("output_dir") or os.environ.get("SGLANG_TORCH_PROFILER_DIR", "/tmp")
        if not isinstance(output_dir, str) or not os.path.isabs(output_dir):
            raise _BadRequest(f"output_dir must be an absolute path, got {output_dir!r}")
        profile_id = body.get("profile_id") or f"{time.time():.6f}"
        if not isinstance(profile_id, str) or not PROFILE_ID.fullmatch(profile_id):
            raise _BadRequest(f"profile_id must be letters, digits, '.', '_' or '-', got {profile_id!r}")
    except _BadRequest as err:
        return _error_400(str(err), openai=False)
    if srv.profiler is not None:
        return web.Response(status=500, text="Profiling is already in progress. Call /stop_profile first.\n")
    done = srv.start_profile(Path(output_dir), num_steps, profile_id)
    if num_steps is not None:
        try:
            await asyncio.shield(done)
        except OSError as err:
            return web.Response(status=500, text=f"The trace could not be written: {err}\n")
    return web.Response(text="Start profiling.\n")


async def stop_profile(request: web.Request) -> web.Response:
    srv = _srv(request)
    if srv.profiler is None:
        return web.Response(status=500, text="Profiling is not in progress. Call /start_profile first.\n")
    srv.finish_profile()
    return web.Response(text="Stop profiling. This will take some time.\n")


async def metrics(request: web.Request) -> web.Response:
    srv = _srv(request)
    body = render_metrics(srv.metrics, srv.gauges)
    faults = srv.opts.telemetry_faults
    if faults.metrics:
        body = faults.metrics_text(body.decode()).encode()
    return web.Response(body=body, content_type="text/plain", charset="utf-8")


async def dcgm_metrics(request: web.Request) -> web.Response:
    srv = _srv(request)
    srv.dcgm_scrapes += 1
    faults = srv.opts.telemetry_faults
    if faults.dcgm == "hang" and srv.dcgm_scrapes > HANG_AFTER_SCRAPES:
        # Until the simulator shuts down: a sleep would hold its graceful shutdown up too.
        await srv.shutting_down.wait()
        raise web.HTTPServiceUnavailable()
    text = render_dcgm(srv.gpus, srv.power, time.monotonic(), srv.opts.dcgm_names == "new")
    return web.Response(text=faults.dcgm_text(text, srv.dcgm_scrapes), content_type="text/plain")


async def truth(request: web.Request) -> web.Response:
    srv = _srv(request)
    try:
        since = float(request.query.get("since", "-inf"))
    except ValueError:
        return _error_400("since must be a time.monotonic() value in seconds", openai=False)
    report = srv.truth.report(srv.rid_prefix, since)
    # Wall seconds the engine fell behind its step deadlines (a starved simulator).
    report["engine"] = {"steps": srv.steps, "lost_s": srv.lost_s}
    return _json(report)


# -- generation ----------------------------------------------------------------------
def _token_ids(value: object, vocab: int, what: str) -> list[int]:
    if not isinstance(value, list) or not all(isinstance(t, int) and not isinstance(t, bool) for t in value):
        raise _BadRequest(f"{what} must be a list of integer token ids")
    bad = next((t for t in value if not 0 <= t < vocab), None)
    if bad is not None:
        raise _BadRequest(f"Token id {bad} in {what} is out of range [0, {vocab}).")
    return value


def _word_id(word: str, vocab: int) -> int:
    # A stable id per word, so equal text is an equal prefix to the cache.
    return zlib.crc32(word.encode()) % vocab


def _words(text: object, what: str, vocab: int) -> list[int]:
    """A text prompt as token ids: one per whitespace-separated word."""
    if not isinstance(text, str):
        raise _BadRequest(f"{what} must be a string")
    return [_word_id(w, vocab) for w in text.split()]


def _bool_field(obj: dict[str, Any], key: str) -> bool:
    value = obj.get(key, False)
    if value is None:
        return False
    if not isinstance(value, bool):
        raise _BadRequest(f"{key} must be true or false, got {value!r}")
    return value


def _parse_generate(body: dict[str, Any], vocab: int) -> tuple[list[int], int, bool]:
    has_text = body.get("text") is not None
    has_ids = body.get("input_ids") is not None
    if has_text == has_ids:
        raise _BadRequest("Either text or input_ids should be provided, not both or neither.")
    if has_ids:
        ids = body["input_ids"]
        if isinstance(ids, list) and ids and isinstance(ids[0], list):
            raise _BadRequest("perfgate.sim does not support batched input_ids; send one request each.")
        prompt = _token_ids(ids, vocab, "input_ids")
    else:
        if isinstance(body["text"], list):
            raise _BadRequest("perfgate.sim does not support batched text; send one request each.")
        prompt = _words(body["text"], "text", vocab)
    params = body.get("sampling_params") or {}
    if not isinstance(params, dict):
        raise _BadRequest("sampling_params must be a JSON object")
    max_new = _int_field(params, "max_new_tokens", 128, 1)
    _bool_field(params, "ignore_eos")
    return prompt, max_new or 128, _bool_field(body, "stream")


def _parse_completion(body: dict[str, Any], vocab: int) -> tuple[list[int], int, bool]:
    prompt = body.get("prompt")
    if isinstance(prompt, list) and len(prompt) == 1 and isinstance(prompt[0], (list, str)):
        prompt = prompt[0]
    if isinstance(prompt, str):
        ids = _words(prompt, "prompt", vocab)
    elif isinstance(prompt, list):
        if prompt and isinstance(prompt[0], (list, str)):
            raise _BadRequest("perfgate.sim does not support batched prompts; send one request each.")
        ids = _token_ids(prompt, vocab, "prompt")
    else:
        raise _BadRequest("prompt must be a string or a list of token ids")
    if _int_field(body, "n", 1, 1) != 1:
        raise _BadRequest("perfgate.sim supports n=1 only")
    max_tokens = _int_field(body, "max_tokens", 16, 1)
    _int_field(body, "min_tokens", 0, 0)
    _bool_field(body, "ignore_eos")
    return ids, max_tokens or 16, _bool_field(body, "stream")


def _parse_chat(body: dict[str, Any], vocab: int) -> tuple[list[int], int, bool]:
    """Messages as token ids: the template's tokens, then per message its role's and the message's words."""
    messages = body.get("messages")
    if not isinstance(messages, list) or not messages:
        raise _BadRequest("messages must be a non-empty list")
    ids = [_word_id(f"<|template-{i}|>", vocab) for i in range(CHAT_TOKENS_PER_PROMPT)]
    for i, message in enumerate(messages):
        if not isinstance(message, dict) or not isinstance(message.get("role"), str):
            raise _BadRequest(f"messages[{i}] must be an object with a role")
        content = message.get("content")
        if isinstance(content, list):
            parts = [p.get("text", "") for p in content if isinstance(p, dict) and p.get("type") == "text"]
            content = " ".join(str(p) for p in parts)
        if content is not None and not isinstance(content, str):
            raise _BadRequest(f"messages[{i}].content must be a string or a list of text parts")
        ids += [_word_id(f"<|{message['role']}-{k}|>", vocab) for k in range(CHAT_TOKENS_PER_MESSAGE)]
        ids += _words(content or "", "content", vocab)
    if _int_field(body, "n", 1, 1) != 1:
        raise _BadRequest("perfgate.sim supports n=1 only")
    max_tokens = _int_field(body, "max_completion_tokens", None, 1)
    if max_tokens is None:
        max_tokens = _int_field(body, "max_tokens", 128, 1)
    _int_field(body, "min_tokens", 0, 0)
    _bool_field(body, "ignore_eos")
    return ids, max_tokens or 128, _bool_field(body, "stream")


def _logprob_ask(body: dict[str, Any], kind: type[Req], prompt: list[int]) -> LogprobAsk | None:
    """What a request asks of the model's logprobs (None: nothing, the load's requests): SGLang's
    ``return_logprob``, ``top_logprobs_num`` and ``logprob_start_len``; OpenAI's ``logprobs``
    (a count for completions, true with ``top_logprobs`` for chat) and ``echo``."""
    if kind is GenerateReq:
        if not _bool_field(body, "return_logprob"):
            return None
        top = _int_field(body, "top_logprobs_num", 0, 0) or 0
        start = _int_field(body, "logprob_start_len", -1, -1)
        # SGLang: -1 scores no prompt token (only the output).
        start = len(prompt) if start is None or start < 0 else min(start, len(prompt))
        return LogprobAsk(top, start, text=_bool_field(body, "return_text_in_logprobs"))
    if kind is ChatReq:
        if not _bool_field(body, "logprobs"):
            return None
        return LogprobAsk(_int_field(body, "top_logprobs", 0, 0) or 0, len(prompt))
    count = _int_field(body, "logprobs", None, 0)
    if count is None:
        return None
    return LogprobAsk(count, 0 if _bool_field(body, "echo") else len(prompt), echo=_bool_field(body, "echo"))


def _usage_options(body: dict[str, Any]) -> tuple[bool, bool]:
    """(include_usage, continuous_usage_stats) as SGLang reads stream_options."""
    options = body.get("stream_options")
    if not isinstance(options, dict):
        return False, False
    return options.get("include_usage") is True, options.get("continuous_usage_stats") is True


async def _generation(request: web.Request, kind: type[Req]) -> web.StreamResponse:
    arrival = time.monotonic()
    srv = _srv(request)
    opts = srv.opts
    openai = kind is not GenerateReq
    srv.seq += 1
    seq = srv.seq
    if opts.crash_after_requests and seq >= opts.crash_after_requests:
        log(f"perfgate.sim: crashing on request {seq} (--crash-after-requests)")
        sys.stderr.flush()
        os._exit(1)
    faults = plan_faults(srv.fault_rng, opts)
    if faults.http_error:
        return _json(
            {
                "object": "error",
                "message": "perfgate.sim injected an internal error",
                "type": "InternalServerError",
                "param": None,
                "code": 500,
            },
            status=500,
        )
    try:
        body = await _read_json(request)
        parse = {GenerateReq: _parse_generate, CompletionReq: _parse_completion, ChatReq: _parse_chat}[kind]
        prompt_ids, out_len, stream = parse(body, opts.vocab_size)
        ask = _logprob_ask(body, kind, prompt_ids)
        if ask is not None and stream:
            raise _BadRequest("perfgate.sim returns logprobs only without stream; send stream = false.")
    except _BadRequest as err:
        if kind is GenerateReq:
            return _json({"error": str(err)}, status=400)
        return _error_400(str(err), openai=True)
    if opts.crash_on_prompt_logprobs and ask is not None and ask.start < len(prompt_ids):
        # A traceback in the log, then the exit, as SGLang's scheduler ends on a CPU host.
        try:
            raise RuntimeError("perfgate.sim cannot score prompt tokens (--crash-on-prompt-logprobs)")
        except RuntimeError:
            log(traceback.format_exc().rstrip())
        sys.stderr.flush()
        os._exit(1)
    requested_model = body.get("model")
    model = requested_model if isinstance(requested_model, str) else opts.served_model_name
    prompt_tokens = len(prompt_ids)
    req = kind(srv, seq, stream, prompt_tokens, out_len, model)
    req.arrival = arrival
    req.include_usage, req.continuous_usage = _usage_options(body)
    if faults.short and out_len > 1:
        req.short = True
        req.out_len = out_len // 2
    # Mid-stream: after about half of the tokens.
    if faults.error_chunk:
        req.fault, req.fault_at = "error", req.out_len // 2 + 1
    elif faults.truncate:
        req.fault, req.fault_at = "truncate", req.out_len // 2 + 1
    try:
        srv.engine.check(prompt_tokens, req.out_len)
    except ValueError as err:
        return _error_400(str(err), openai=openai)
    req.transport = request.transport
    if ask is not None:
        req.expect(ask, prompt_ids)
    elif kind is GenerateReq and not (opts.load_one_token or opts.tape_answers):
        req.follow(prompt_ids)
    if not stream:
        srv.submit(req, prompt_ids)
        outcome = await req.done
        if outcome == "ok":
            return _json(req.body)
        if outcome == "error":
            return _json({"error": {"message": "perfgate.sim injected an error"}}, status=500)
        raise web.HTTPInternalServerError()  # truncated or gone: no response reaches anyone
    resp = web.StreamResponse(headers={"Content-Type": "text/event-stream", "Cache-Control": "no-cache"})
    await resp.prepare(request)
    await resp.write(b"")  # flush the headers now, as uvicorn does
    req.chunked = resp.headers.get("Transfer-Encoding", "").lower() == "chunked"
    if req.transport is None or req.transport.is_closing():
        return resp
    # Tokens are written straight to the transport from here on.
    srv.submit(req, prompt_ids)
    outcome = await req.done
    if outcome in ("ok", "error"):
        await resp.write_eof()
    return resp


async def generate(request: web.Request) -> web.StreamResponse:
    return await _generation(request, GenerateReq)


async def completions(request: web.Request) -> web.StreamResponse:
    return await _generation(request, CompletionReq)


async def chat_completions(request: web.Request) -> web.StreamResponse:
    return await _generation(request, ChatReq)


async def tokenize(request: web.Request) -> web.Response:
    """SGLang's /v1/tokenize: ``prompt`` a string or a list of strings, tokenized as generation
    requests' text is (one id per word); ``tokens`` and ``count`` answer in the same shape."""
    opts = _srv(request).opts
    try:
        body = await _read_json(request)
        prompt = body.get("prompt")
        if isinstance(prompt, list):
            batch = [_words(text, "prompt[]", opts.vocab_size) for text in prompt]
            answer = {"tokens": batch, "count": [len(ids) for ids in batch]}
        else:
            ids = _words(prompt, "prompt", opts.vocab_size)
            answer = {"tokens": ids, "count": len(ids)}
    except _BadRequest as err:
        return _error_400(str(err), openai=True)
    return _json({**answer, "max_model_len": opts.max_total_tokens})


async def _shutting_down(app: web.Application) -> None:
    app[_SERVER].shutting_down.set()


def build_app(srv: SimServer) -> web.Application:
    app = web.Application(client_max_size=64 * 1024 * 1024)
    app[_SERVER] = srv
    app.on_startup.append(srv.start)
    app.on_cleanup.append(srv.stop)
    app.on_shutdown.append(_shutting_down)
    app.router.add_get("/health", health)
    app.router.add_get("/health_generate", health)
    app.router.add_get("/ready", health)
    app.router.add_get("/model_info", model_info)
    app.router.add_get("/get_model_info", model_info)
    app.router.add_get("/server_info", server_info)
    app.router.add_get("/get_server_info", server_info)
    app.router.add_get("/v1/models", models)
    app.router.add_post("/generate", generate)
    app.router.add_put("/generate", generate)
    app.router.add_post("/v1/completions", completions)
    app.router.add_post("/v1/chat/completions", chat_completions)
    app.router.add_post("/v1/tokenize", tokenize)
    app.router.add_post("/tokenize", tokenize)
    app.router.add_route("*", "/flush_cache", flush_cache)
    app.router.add_get("/metrics", metrics)
    app.router.add_route("*", "/start_profile", start_profile)
    app.router.add_route("*", "/stop_profile", stop_profile)
    app.router.add_get("/dcgm/metrics", dcgm_metrics)
    app.router.add_get("/sim/truth", truth)
    return app
