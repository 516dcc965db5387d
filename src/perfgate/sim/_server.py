"""The HTTP side of the simulator: SGLang's endpoints on aiohttp.web.

One engine task runs the steps: it sleeps until each step's absolute deadline (so step
times do not drift) and then writes the step's tokens straight to every running stream's
transport, framing the HTTP chunks itself. Chunks are assembled from pre-built byte pieces
(cumulative text and output_ids are slices of shared tapes), so a streamed chunk costs a
few joins and one ``transport.write``. Handlers only parse the request, send the headers,
and wait for their request's end.
"""

from __future__ import annotations

import asyncio
import json
import math
import os
import random
import sys
import time
import traceback
import uuid
from array import array
from collections import deque
from dataclasses import dataclass
from pathlib import Path
from typing import Any, NamedTuple

from aiohttp import web

from perfgate.sim._engine import Engine
from perfgate.sim._gpus import PowerModel, make_gpus
from perfgate.sim._kernels import Profiler
from perfgate.sim._metrics import ServerMetrics
from perfgate.sim._model import CONTEXT, Scored, ToyModel
from perfgate.sim._options import SimOptions
from perfgate.sim._spin import Spinner

VERSION = "0.5.23+perfgate-sim"
READY_LINE = "The server is fired up and ready to roll!"
FAIL_LINE = "Initialization failed. warmup error"
# A starved event loop (2 cores shared with the client, 1024 requests arriving at once)
# catches up on missed step time, back to back, up to this much; beyond it the time is lost
# (counted in /sim/truth). 0.5 s lost ~8% TPOT under a load average of 8; 2 s lost none.
MAX_LAG_S = 2.0
GEN_THROUGHPUT_STEPS = 40
# Chat prompts: words in the messages plus the chat template's tokens.
CHAT_TOKENS_PER_MESSAGE = 4
CHAT_TOKENS_PER_PROMPT = 3
EOS_TOKEN_ID = 151329
WORD = b" tok"
_WORD_LEN = len(WORD)

JSON_DUMPS = json.JSONEncoder(ensure_ascii=False, separators=(",", ":")).encode


def jbytes(value: object) -> bytes:
    return JSON_DUMPS(value).encode()


def sse(value: object) -> bytes:
    """One server-sent event carrying ``value`` as JSON."""
    return b"data: " + jbytes(value) + b"\n\n"


# PERFGATE_SIM_LOAD_ONE_TOKEN: the load's every token, as a lying proxy rewrites it.
ONE_TOKEN_ID = 1000
ONE_TOKEN_WORD = b"X"


class _Tapes:
    """Cumulative generated text and output_ids as growable byte strings; ``one_token``: every
    token one id spelled "X" (sim._options.LOAD_ONE_TOKEN_ENV)."""

    def __init__(self, vocab_size: int, one_token: bool = False) -> None:
        self._vocab = vocab_size
        self._one_token = one_token
        self.word = ONE_TOKEN_WORD if one_token else WORD
        self.text = b""
        self.ids = b""
        self.id_offsets = array("q", [0])

    def token_id(self, position: int) -> int:
        return ONE_TOKEN_ID if self._one_token else (1000 + 7919 * position) % self._vocab

    def ensure(self, n: int) -> None:
        have = len(self.id_offsets) - 1
        if n <= have:
            return
        target = max(n, 2 * have, 256)
        self.text = self.word * target
        pieces = [self.ids] if have else []
        offsets = self.id_offsets
        size = len(self.ids)
        for i in range(have, target):
            piece = (b"," if i else b"") + str(self.token_id(i)).encode()
            pieces.append(piece)
            size += len(piece)
            offsets.append(size)
        self.ids = b"".join(pieces)

    def id_list(self, n: int) -> list[int]:
        return [self.token_id(i) for i in range(n)]


@dataclass(frozen=True)
class LogprobAsk:
    """A request's ask for the model's logprobs: the ``top`` most likely tokens per position, prompt
    tokens scored from ``start`` on, and (OpenAI's ``echo``) the prompt echoed back."""

    top: int
    start: int
    echo: bool = False
    # SGLang's return_text_in_logprobs: each entry spells its token.
    text: bool = False


def _token_name(token: int) -> str:
    # The simulator has no tokenizer: tokens are named as vLLM's return_tokens_as_token_ids does.
    return f"token_id:{token}"


class Req:
    """One generation request; subclasses know their API's chunk shapes."""

    __slots__ = (
        "_context",
        "_ids",
        "_ids_json",
        "_mid",
        "_prompt_ids",
        "_tail",
        "arrival",
        "ask",
        "body",
        "cached",
        "chunked",
        "continuous_usage",
        "created",
        "done",
        "eid",
        "fault",
        "fault_at",
        "first_t",
        "include_usage",
        "last_t",
        "model",
        "n",
        "out_len",
        "prompt_tokens",
        "rid",
        "scored_input",
        "scored_output",
        "sent",
        "seq",
        "short",
        "srv",
        "stream",
        "transport",
    )

    def __init__(self, srv: SimServer, seq: int, stream: bool, prompt_tokens: int, out_len: int, model: str) -> None:
        self.srv = srv
        self.seq = seq
        self.eid = -1
        self.rid = srv.rid_prefix + f"{seq:08x}"
        self.stream = stream
        self.prompt_tokens = prompt_tokens
        self.out_len = out_len
        self.model = model
        self.arrival = time.monotonic()
        self.first_t = math.nan
        self.last_t = 0.0
        self.n = 0
        self.sent = 0
        self.fault = ""
        self.fault_at = 0
        self.short = False
        self.transport: Any = None
        self.chunked = True
        self.done: asyncio.Future[str] = asyncio.get_running_loop().create_future()
        self.body: object = None
        self.created = int(time.time())
        self.include_usage = False
        # stream_options.continuous_usage_stats: cumulative usage on every content chunk (SGLang, vLLM).
        self.continuous_usage = False
        self._mid = b""
        # Prompt tokens served from the prefix cache, known once the prefill is done.
        self.cached = 0
        self._tail = b""
        # Requests that ask for logprobs are answered by the toy model (sim._model), not the tape.
        self.ask: LogprobAsk | None = None
        self._prompt_ids: list[int] = []
        self._context: list[int] = []
        # A load request answered by the model (follow): its ids so far, and as SGLang's JSON list.
        self._ids: array[int] | None = None
        self._ids_json = bytearray()
        self.scored_input: list[Scored] = []
        self.scored_output: list[Scored] = []

    def expect(self, ask: LogprobAsk, prompt: list[int]) -> None:
        """Answer this request with the toy model, one token per engine step as it is computed."""
        self.ask = ask
        self._prompt_ids = prompt
        self._context = list(prompt)

    def follow(self, prompt: list[int]) -> None:
        """Answer this load request with the toy model's greedy ids, each computed in its engine
        step (a batch-dependent fault corrupts the tokens of a full batch, as it would a real one's)."""
        self._context = prompt[-CONTEXT:]
        self._ids = array("q")

    def _next_id(self, batch: int) -> None:
        assert self._ids is not None
        token = self.srv.model.next_token(self._context, batch)
        self._context = [*self._context, token][-CONTEXT:]
        self._ids_json += b",%d" % token if self._ids else b"%d" % token
        self._ids.append(token)

    def _advance(self, batch: int) -> None:
        """The toy model's next token, computed in a step of ``batch`` requests (the prompt's
        logprobs with the first, in the prefill step)."""
        assert self.ask is not None
        model, ask = self.srv.model, self.ask
        if not self.scored_output and ask.start < len(self._prompt_ids):
            self.scored_input = model.teacher_forced(self._prompt_ids, ask.start, batch, ask.top)
        pos = model.greedy(self._context, 1, batch, ask.top)[0]
        self._context.append(pos.token)
        self.scored_output.append(pos)

    def output_ids(self) -> list[int]:
        if self.ask is not None:
            return [s.token for s in self.scored_output[: self.n]]
        if self._ids is not None:
            return self._ids[: self.n].tolist()
        return self.srv.tapes.id_list(self.n)

    # -- called by the engine task once per token -----------------------------------
    def on_token(self, now: float) -> None:
        n = self.n + 1
        self.n = n
        srv = self.srv
        if self.ask is not None:
            self._advance(srv.step_batch)
        elif self._ids is not None:
            self._next_id(srv.step_batch)
        if n == 1:
            self.first_t = now
            self.cached = srv.engine.cached_tokens(self.eid)
            self._tail = b',"cached_tokens":%d}}\n\n' % self.cached
            srv.metrics.ttft[self.stream].observe(now - self.arrival)
        else:
            srv.metrics.itl.observe(now - self.last_t)
        self.last_t = now
        if n == self.fault_at:
            srv.fail_midway(self, now)
            return
        if n == self.out_len:
            if self.stream:
                self.send(self.final_chunks(now) + b"data: [DONE]\n\n")
            srv.finish(self, now, "ok")
        elif self.stream and (n == 1 or n % srv.stream_interval == 0):
            self.send(self.chunk(n))

    def send(self, payload: bytes) -> None:
        """Write already-serialised SSE bytes as one HTTP chunk."""
        transport = self.transport
        if transport.is_closing():
            self.srv.client_gone(self)
            return
        if self.chunked:
            transport.write(b"%x\r\n%b\r\n" % (len(payload), payload))
        else:
            transport.write(payload)
        self.sent = self.n

    def finish_reason(self) -> dict[str, object]:
        if self.short:
            return {"type": "stop", "matched": EOS_TOKEN_ID}
        return {"type": "length", "length": self.n}

    def e2e_s(self, now: float) -> float:
        return now - self.arrival

    def word(self) -> bytes:
        """One token's text: the probe's answers (the toy model's) are never rewritten."""
        return WORD if self.ask is not None else self.srv.tapes.word

    def text(self) -> str:
        return (self.word() * self.n).decode()

    # -- API specific ---------------------------------------------------------------
    def prepare(self) -> None:
        """Build the byte pieces every chunk of this request shares."""
        raise NotImplementedError

    def chunk(self, n: int) -> bytes:
        raise NotImplementedError

    def final_chunks(self, now: float) -> bytes:
        raise NotImplementedError

    def response(self, now: float) -> object:
        raise NotImplementedError


class GenerateReq(Req):
    """SGLang's native /generate: cumulative text and output_ids in every chunk."""

    __slots__ = ()

    def prepare(self) -> None:
        self._mid = (
            b'],"meta_info":{"id":"'
            + self.rid.encode()
            + b'","finish_reason":null,"prompt_tokens":%d' % self.prompt_tokens
            + b',"weight_version":"default","num_retractions":0,"reasoning_tokens":0,"completion_tokens":'
        )
        self.srv.tapes.ensure(self.out_len)

    def chunk(self, n: int) -> bytes:
        tapes = self.srv.tapes
        return b"".join(
            (
                b'data: {"text":"',
                tapes.text[: len(tapes.word) * n],
                b'","output_ids":[',
                tapes.ids[: tapes.id_offsets[n]] if self._ids is None else self._ids_json,
                self._mid,
                b"%d" % n,
                self._tail,
            )
        )

    def meta_info(self, now: float) -> dict[str, object]:
        return {
            "id": self.rid,
            "finish_reason": self.finish_reason(),
            "prompt_tokens": self.prompt_tokens,
            "weight_version": "default",
            "num_retractions": 0,
            "reasoning_tokens": 0,
            "completion_tokens": self.n,
            "cached_tokens": self.cached,
            "e2e_latency": self.e2e_s(now),
        }

    def response(self, now: float) -> object:
        meta = self.meta_info(now)
        ask = self.ask
        if ask is not None:
            # SGLang's shapes: [logprob, token id, text] per position (text only with return_text_in_logprobs).
            spelled = WORD.decode() if ask.text else None

            def entry(lp: float | None, token: int) -> list[object]:
                return [lp, token, spelled]

            opts = self.srv.opts
            out = self.scored_output[: self.n if opts.cut_answers is None else min(self.n, opts.cut_answers)]
            ids = [s.token for s in out]
            meta["output_token_logprobs"] = [entry(s.logprob, s.token) for s in out]
            prompt = self._prompt_ids
            if ask.start < len(prompt):
                first = [entry(None, prompt[0])] if ask.start == 0 else []
                meta["input_token_logprobs"] = first + [entry(s.logprob, s.token) for s in self.scored_input]
            if ask.top:
                if not opts.no_top_logprobs:
                    meta["output_top_logprobs"] = [[entry(lp, t) for t, lp in s.top] for s in out]
                if ask.start < len(prompt):
                    first_top: list[object] = [None] if ask.start == 0 else []
                    meta["input_top_logprobs"] = first_top + [
                        [entry(lp, t) for t, lp in s.top] for s in self.scored_input
                    ]
        else:
            ids = self.output_ids()
        return {"text": self.text(), "output_ids": ids, "meta_info": meta}

    def final_chunks(self, now: float) -> bytes:
        return sse(self.response(now))


class CompletionReq(Req):
    """OpenAI /v1/completions: text deltas; finish_reason on the last content chunk."""

    __slots__ = ()

    def prepare(self) -> None:
        self._mid = (
            b'data: {"id":"'
            + self.rid.encode()
            + b'","object":"text_completion","created":%d' % self.created
            + b',"model":'
            + jbytes(self.model)
            + b',"choices":[{"index":0,"text":"'
        )

    def chunk(self, n: int) -> bytes:
        return b"".join(
            (
                self._mid,
                self.word() * (n - self.sent),
                b'","logprobs":null,"finish_reason":null,"matched_stop":null}],"usage":',
                self.running_usage(n),
                b"}\n\n",
            )
        )

    def running_usage(self, n: int) -> bytes:
        if not self.continuous_usage:
            return b"null"
        return b'{"prompt_tokens":%d,"total_tokens":%d,"completion_tokens":%d,"reasoning_tokens":0}' % (
            self.prompt_tokens,
            self.prompt_tokens + n,
            n,
        )

    def usage(self) -> dict[str, object]:
        return {
            "prompt_tokens": self.prompt_tokens,
            "total_tokens": self.prompt_tokens + self.n,
            "completion_tokens": self.n,
            "reasoning_tokens": 0,
        }

    def full_usage(self) -> dict[str, object]:
        """The usage of a final chunk or response, with the prompt's cached tokens."""
        return dict(self.usage(), prompt_tokens_details={"cached_tokens": self.cached}, completion_tokens_details=None)

    def _finish_type(self) -> str:
        return "stop" if self.short else "length"

    def _matched(self) -> int | None:
        return EOS_TOKEN_ID if self.short else None

    # The object names SGLang's OpenAI server gives a streamed chunk and a whole response.
    _CHUNK_OBJECT = "text_completion"
    _RESPONSE_OBJECT = "text_completion"

    def _envelope(self, obj: str, choices: list[dict[str, object]], **fields: object) -> dict[str, object]:
        head = {"id": self.rid, "object": obj, "created": self.created, "model": self.model}
        return {**head, "choices": choices, **fields}

    def _logprobs(self) -> object:
        """OpenAI completions' logprobs object: tokens, token_logprobs, top_logprobs, text_offset
        (the prompt's first, with ``echo``; its first token has no logprob)."""
        ask = self.ask
        if ask is None:
            return None
        tokens: list[str] = []
        logprobs: list[float | None] = []
        tops: list[dict[str, float] | None] = []
        if ask.echo and self._prompt_ids:
            tokens.append(_token_name(self._prompt_ids[0]))
            logprobs.append(None)
            tops.append(None)
        for s in [*self.scored_input, *self.scored_output[: self.n]]:
            tokens.append(_token_name(s.token))
            logprobs.append(s.logprob)
            tops.append({_token_name(t): lp for t, lp in s.top})
        return {
            "tokens": tokens,
            "token_logprobs": logprobs,
            "top_logprobs": tops if ask.top else None,
            "text_offset": [_WORD_LEN * i for i in range(len(tokens))],
        }

    def _last_choice(self, **content: object) -> dict[str, object]:
        """The one choice of a final chunk or response: ``content`` then how it finished."""
        return {
            "index": 0,
            **content,
            "logprobs": self._logprobs(),
            "finish_reason": self._finish_type(),
            "matched_stop": self._matched(),
        }

    def _usage_chunk(self) -> bytes:
        """The chunk ``stream_options.include_usage`` asks for: no choices, the whole usage."""
        if not self.include_usage:
            return b""
        return sse(self._envelope(self._CHUNK_OBJECT, [], usage=self.full_usage()))

    def _response_content(self) -> dict[str, object]:
        return {"text": self.text()}

    def final_chunks(self, now: float) -> bytes:
        rest = {"text": (self.word() * (self.n - self.sent)).decode()}
        usage = self.usage() if self.continuous_usage else None
        return sse(self._envelope(self._CHUNK_OBJECT, [self._last_choice(**rest)], usage=usage)) + self._usage_chunk()

    def response(self, now: float) -> object:
        choice = self._last_choice(**self._response_content())
        return self._envelope(self._RESPONSE_OBJECT, [choice], usage=self.full_usage(), metadata=None)


class ChatReq(CompletionReq):
    """OpenAI /v1/chat/completions: a role chunk, content deltas, a finish chunk, usage."""

    __slots__ = ()

    def prepare(self) -> None:
        self._mid = (
            b'data: {"id":"'
            + self.rid.encode()
            + b'","object":"chat.completion.chunk","created":%d' % self.created
            + b',"model":'
            + jbytes(self.model)
            + b',"choices":[{"index":0,"delta":'
        )

    _TAIL = b',"logprobs":null,"finish_reason":null,"matched_stop":null}]'

    def chunk(self, n: int) -> bytes:
        tail = self._TAIL + (b',"usage":' + self.running_usage(n) if self.continuous_usage else b"") + b"}\n\n"
        content = b"".join(
            (
                self._mid,
                b'{"reasoning_content":null,"content":"',
                self.word() * (n - self.sent),
                b'"}',
                tail,
            )
        )
        if self.sent == 0:
            return self._mid + b'{"reasoning_content":null,"role":"assistant","content":""}' + tail + content
        return content

    _CHUNK_OBJECT = "chat.completion.chunk"
    _RESPONSE_OBJECT = "chat.completion"

    def _response_content(self) -> dict[str, object]:
        return {"message": {"role": "assistant", "content": self.text(), "reasoning_content": None}}

    def _logprobs(self) -> object:
        """OpenAI chat's logprobs object: one entry per output token, with its top alternatives."""
        if self.ask is None:
            return None
        return {
            "content": [
                {
                    "token": _token_name(s.token),
                    "logprob": s.logprob,
                    "bytes": None,
                    "top_logprobs": [{"token": _token_name(t), "logprob": lp, "bytes": None} for t, lp in s.top],
                }
                for s in self.scored_output[: self.n]
            ]
        }

    def final_chunks(self, now: float) -> bytes:
        # The last content (if any) in a chunk of its own, then a finish chunk without content.
        rest = self.chunk(self.n) if self.n > self.sent else b""
        finish = self._envelope(self._CHUNK_OBJECT, [self._last_choice(delta={"reasoning_content": None})])
        return rest + sse(finish) + self._usage_chunk()


class FaultPlan(NamedTuple):
    """Which injected faults hit one request."""

    http_error: bool
    error_chunk: bool
    truncate: bool
    short: bool


def plan_faults(rng: random.Random, opts: SimOptions) -> FaultPlan:
    """One draw per knob and request, whatever the rates, so the choices for the N-th
    request depend on the seed and N only."""
    draws = [rng.random() for _ in range(4)]
    return FaultPlan(
        http_error=draws[0] < opts.http_error_rate,
        error_chunk=draws[1] < opts.error_chunk_rate,
        truncate=draws[2] < opts.truncate_rate,
        short=draws[3] < opts.short_rate,
    )


class _Truth:
    """Finished requests as compact columns (time.monotonic() seconds)."""

    def __init__(self) -> None:
        self.seq = array("q")
        self.arrival = array("d")
        self.first = array("d")
        self.finish = array("d")
        self.outputs = array("q")

    def add(self, req: Req, now: float) -> None:
        self.seq.append(req.seq)
        self.arrival.append(req.arrival)
        self.first.append(req.first_t)
        self.finish.append(now)
        self.outputs.append(req.n)

    def report(self, prefix: str, since: float) -> dict[str, object]:
        keep = [i for i, t in enumerate(self.arrival) if t >= since]
        ttfts = [self.first[i] - self.arrival[i] for i in keep]
        tpots = [(self.finish[i] - self.first[i]) / (self.outputs[i] - 1) for i in keep if self.outputs[i] > 1]
        e2e = [self.finish[i] - self.arrival[i] for i in keep]

        def mean_ms(values: list[float]) -> float | None:
            return sum(values) / len(values) * 1e3 if values else None

        return {
            "clock": "time.monotonic",
            "requests": {
                "id": [prefix + f"{self.seq[i]:08x}" for i in keep],
                "arrival_s": [self.arrival[i] for i in keep],
                "first_token_s": [self.first[i] for i in keep],
                "finish_s": [self.finish[i] for i in keep],
                "output_tokens": [self.outputs[i] for i in keep],
            },
            "aggregates": {
                "completed": len(keep),
                "output_tokens": sum(self.outputs[i] for i in keep),
                "mean_ttft_ms": mean_ms(ttfts),
                "mean_tpot_ms": mean_ms(tpots),
                "mean_e2e_latency_ms": mean_ms(e2e),
            },
        }


def log(message: str) -> None:
    stamp = time.strftime("%Y-%m-%d %H:%M:%S")
    print(f"[{stamp}] {message}", flush=True)


class SimServer:
    """State shared by the handlers and the engine task."""

    def __init__(self, opts: SimOptions) -> None:
        self.opts = opts
        self.config = opts.engine_config()
        self.engine = Engine(self.config)
        self.stream_interval = opts.stream_interval
        self.tapes = _Tapes(opts.vocab_size, opts.load_one_token)
        self.model = ToyModel(
            opts.vocab_size,
            seed=opts.seed,
            corrupt_rate=opts.corrupt_rate,
            corrupt_above_batch=opts.corrupt_above_batch,
            nan_logprobs=opts.nan_logprobs,
        )
        self.metrics = ServerMetrics(opts.served_model_name)
        self.dcgm_scrapes = 0
        # Set when the app shuts down: ends what hangs on purpose (PERFGATE_SIM_DCGM_FAULT=hang).
        self.shutting_down = asyncio.Event()
        self.truth = _Truth()
        self.gpus = make_gpus(opts.gpus, opts.gpu_name, opts.power_limit_w, opts.idle_gpus, opts.seed)
        self.power = PowerModel(opts.idle_power_w, opts.full_power_w, time.monotonic())
        self.spinner = Spinner() if opts.spin_process else None
        self.rid_prefix = uuid.UUID(int=random.Random(f"perfgate-sim-rid-{opts.seed}").getrandbits(128)).hex[:24]
        self.fault_rng = random.Random(f"perfgate-sim-faults-{opts.seed}")
        self.reqs: dict[int, Req] = {}
        self.seq = 0
        self.ready = False
        self.startup_time = time.time()
        self._wake = asyncio.Event()
        self._idle = asyncio.Event()
        self._idle.set()
        # SGLang logs its generation throughput every 40 decode steps (--decode-log-interval).
        self._gen_window: deque[tuple[float, int]] = deque(maxlen=GEN_THROUGHPUT_STEPS + 1)
        self._tasks: list[asyncio.Task[None]] = []
        self.steps = 0
        self.lost_s = 0.0
        # Requests in the step whose tokens are being delivered (the toy model's batch).
        self.step_batch = 1
        self._stalled = False
        self.profiler: Profiler | None = None
        self._profile_done: asyncio.Future[Path] | None = None

    # -- lifecycle ------------------------------------------------------------------
    async def start(self, app: web.Application) -> None:
        self._tasks.append(asyncio.create_task(self._engine_loop()))

    def on_listening(self, message: str) -> None:
        """Called once the port is bound (aiohttp's ``run_app(print=...)`` hook): only then
        may the warmup end in the ready line, which launchers take as "serving"."""
        self._tasks.append(asyncio.get_running_loop().create_task(self._warmup()))

    async def stop(self, app: web.Application) -> None:
        for task in self._tasks:
            task.cancel()
        await asyncio.gather(*self._tasks, return_exceptions=True)
        if self.spinner is not None:
            self.spinner.close()

    async def _warmup(self) -> None:
        opts = self.opts
        log(
            f"perfgate.sim {opts.version or VERSION}: {opts.gpus} x {opts.gpu_name}, model {opts.model_path}, "
            f"http://{opts.host}:{opts.port}"
        )
        if opts.hang_at_startup:
            return
        await asyncio.sleep(opts.startup_delay_s)
        if opts.fail_at_startup:
            log(FAIL_LINE)
            sys.stderr.flush()
            os._exit(1)
        self.ready = True
        log(READY_LINE)

    # -- engine task ----------------------------------------------------------------
    async def _engine_loop(self) -> None:
        try:
            await self._run_engine()
        except asyncio.CancelledError:
            raise
        except BaseException:
            # A bug here would leave every client hanging: die loudly instead.
            traceback.print_exc()
            sys.stderr.flush()
            os._exit(70)

    def _set_busy(self, busy: bool, now_s: float) -> None:
        self.power.set_busy(busy, now_s)
        if self.spinner is not None:
            self.spinner.set_busy(busy)

    async def _run_engine(self) -> None:
        engine = self.engine
        loop = asyncio.get_running_loop()
        reqs = self.reqs
        window = self._gen_window
        deadline = -math.inf
        while True:
            if await self._one_off_stall():
                deadline = -math.inf  # the stall is not owed to the next step
            step = engine.step()
            if step is None:
                self._set_busy(False, time.monotonic())
                self._idle.set()
                self._wake.clear()
                await self._wake.wait()
                deadline = -math.inf  # idle time is not owed to the next step
                continue
            self._idle.clear()
            start = loop.time()
            if deadline < start - MAX_LAG_S:
                if deadline > -math.inf:
                    # Starved of CPU for longer than catching up would hide: these
                    # seconds are added to the model's time, and reported.
                    self.lost_s += start - deadline
                deadline = start
            if step.duration_s > 0:
                self._set_busy(True, start)
            deadline += step.duration_s
            self.steps += 1
            profiler = self.profiler
            if profiler is not None and profiler.add(
                time.time(), step.duration_s, step.kind, step.batch_requests, step.prefill_tokens
            ):
                self.finish_profile()
            await asyncio.sleep(deadline - start)
            now = time.monotonic()
            get = reqs.get
            self.step_batch = step.batch_requests
            for rid in step.tokens_for:
                req = get(rid)
                if req is not None:
                    req.on_token(now)
            window.append((now, engine.generated_tokens))

    async def _one_off_stall(self) -> bool:
        """--stall-after-requests: stop the engine once for --stall-s, as a kernel compiled on first use would."""
        opts = self.opts
        if self._stalled or not opts.stall_after_requests or self.seq < opts.stall_after_requests:
            return False
        self._stalled = True
        log(f"perfgate.sim: engine stalled for {opts.stall_s:g} s after request {self.seq} (--stall-after-requests)")
        await asyncio.sleep(opts.stall_s)
        return True

    def start_profile(self, output_dir: Path, num_steps: int | None, profile_id: str) -> asyncio.Future[Path]:
        """Profile the next ``num_steps`` steps (None: until :meth:`finish_profile`); the future holds the trace."""
        self.profiler = Profiler(output_dir, num_steps, profile_id, self.opts.slow_kernel)
        self._profile_done = asyncio.get_running_loop().create_future()
        return self._profile_done

    def finish_profile(self) -> None:
        profiler, done = self.profiler, self._profile_done
        self.profiler = self._profile_done = None
        if profiler is None or done is None:
            return
        try:
            done.set_result(profiler.write())
        except OSError as err:
            done.set_exception(err)

    def submit(self, req: Req, prompt_ids: list[int]) -> None:
        """Queue ``req`` in the engine (ValueError if it can never run)."""
        req.eid = self.engine.submit(len(prompt_ids), req.out_len, prompt_ids)
        req.prepare()
        self.reqs[req.eid] = req
        self._idle.clear()
        self._wake.set()

    def finish(self, req: Req, now: float, outcome: str) -> None:
        """The request is over (``outcome``: ok, error, truncated, gone)."""
        if outcome != "ok":
            self.engine.abort(req.eid)
        self.reqs.pop(req.eid, None)
        m = self.metrics
        m.prompt_tokens[req.stream] += req.prompt_tokens
        m.cached_tokens += req.cached
        m.generation_tokens[req.stream] += req.n
        if outcome == "ok":
            m.e2e[req.stream].observe(now - req.arrival)
            self.truth.add(req, now)
            if not req.stream:
                req.body = req.response(now)
        if not req.done.done():
            req.done.set_result(outcome)

    def fail_midway(self, req: Req, now: float) -> None:
        if req.fault == "error":
            if req.stream:
                error = {
                    "error": {
                        "message": "perfgate.sim injected a mid-stream error",
                        "type": "invalid_request_error",
                        "code": 400,
                        "retryable": False,
                    }
                }
                req.send(sse(error) + b"data: [DONE]\n\n")
            self.finish(req, now, "error")
        else:
            if req.transport is not None:
                req.transport.close()
            self.finish(req, now, "truncated")

    def client_gone(self, req: Req) -> None:
        self.finish(req, time.monotonic(), "gone")

    # -- readings -------------------------------------------------------------------
    def gauges(self) -> dict[str, float]:
        engine = self.engine
        window = self._gen_window
        throughput = 0.0
        if len(window) >= 2 and window[-1][0] > time.monotonic() - 2.0:
            (t0, g0), (t1, g1) = window[0], window[-1]
            throughput = (g1 - g0) / (t1 - t0) if t1 > t0 else 0.0
        return {
            "sglang:num_running_reqs": engine.num_running,
            "sglang:num_queue_reqs": engine.num_waiting,
            "sglang:gen_throughput": throughput,
            "sglang:token_usage": engine.kv_used_tokens / self.config.max_total_tokens,
            "sglang:cache_hit_rate": engine.last_cache_hit_rate,
        }

    async def wait_idle(self, timeout_s: float) -> bool:
        try:
            await asyncio.wait_for(self._idle.wait(), timeout_s)
        except asyncio.TimeoutError:  # not the builtin TimeoutError before Python 3.11
            return False
        return True
