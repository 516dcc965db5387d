"""A small SGLang-shaped HTTP/1.1 server with the quirks real engines have, for the fault tests.

Standard library only, so it runs as ``python tests/faults/quirky_server.py --port P ...``
under any interpreter. It serves ``/health``, ``/health_generate``, ``/v1/models``,
``/version`` and a streaming ``POST /generate`` (SGLang's chunk shape: cumulative
``meta_info.completion_tokens``, ``data: [DONE]``). The quirks:

--endless KIND     answers /generate with bytes that never make progress, 20 a second, forever:
                   ``comment`` (": ping" SSE comments), ``blank`` (empty lines), ``event``
                   ("event: ping" without data), ``field`` ("id:"/"retry:" lines), ``space``
                   (keep-alive whitespace), ``html`` (a 200 text/html body), ``json`` (a 200
                   JSON body of whitespace), ``empty-event`` ("data: {}"), ``same-chunk`` (one
                   token, then the same chunk again and again), ``header`` (an endless header
                   line), ``status-line`` (an endless first line)
--html-200         answers /generate with a 200 text/html page that quotes the request's
                   Authorization header (a misconfigured proxy's login page)
--drop-reused      answers one request per connection and says "Connection: keep-alive", then
                   closes the connection without a word when a second request arrives on it
                   (the keep-alive race some engines lose 5-22 % of requests to)
--close-header     answers with "Connection: close" and closes after each response
--buffered         generates as usual but sends each answer in one write at its end (a proxy
                   that buffers the stream); also QUIRKY_BUFFERED=1, which leaves the command
                   line, and so the baseline fingerprint, as it was
--hang-after N     stops sending (without closing) after N tokens of every stream
--tokens-per-chunk K, --no-counts
                   K tokens per chunk, with or without the server's token counts
--split-writes     writes every HTTP chunk in two pieces, the cut inside the SSE event, with a
                   pause between them (a busy server or network splits them the same way)
--crlf             ends SSE lines with CRLF
--close-delimited  streams without chunked encoding or a Content-Length: the body ends when
                   the server closes the connection
--gzip-header      says "Content-Encoding: gzip" (without compressing)
--echo-auth WHERE  quotes the request's Authorization header back: "401" answers every
                   /generate with a 401 page quoting it, "500" answers every 4th /generate with
                   a 500 quoting it, "info" serves it in /server_info (under an innocent key)
                   and prints it to stdout (the server log); repeatable
--echo-form FORM   how it is quoted: "raw", "url" (percent-encoded) or "base64"
-t/--threads N     accepted and ignored: a short and a long spelling of one option
--count-factor F   reports F x the tokens it streamed as completion_tokens (a miscounting server)
--extra-tokens N   streams N tokens beyond max_new_tokens, counting them
--prompt-tokens-offset N
                   reports meta_info.prompt_tokens as the ids it was sent plus N
"""

from __future__ import annotations

import argparse
import asyncio
import base64
import json
import os
import urllib.parse

# --endless: what is sent before the trickle, and the trickle's unit.
_SSE_HEAD = b"HTTP/1.1 200 OK\r\nContent-Type: text/event-stream\r\nTransfer-Encoding: chunked\r\n\r\n"


def _chunk(data: bytes) -> bytes:
    return f"{len(data):x}\r\n".encode() + data + b"\r\n"


_SAME_CHUNK = b'data: {"text": "x", "meta_info": {"id": "q", "completion_tokens": 1, "finish_reason": null}}\n\n'
ENDLESS = {
    "comment": (_SSE_HEAD, _chunk(b": ping\n\n")),
    "blank": (_SSE_HEAD, _chunk(b"\n")),
    "event": (_SSE_HEAD, _chunk(b"event: ping\n\n")),
    "field": (_SSE_HEAD, _chunk(b"id: 7\nretry: 1000\n\n")),
    "space": (_SSE_HEAD, _chunk(b" ")),
    "empty-event": (_SSE_HEAD, _chunk(b"data: {}\n\n")),
    "same-chunk": (
        _SSE_HEAD + _chunk(_SAME_CHUNK),
        _chunk(_SAME_CHUNK),
    ),
    "html": (b"HTTP/1.1 200 OK\r\nContent-Type: text/html\r\n\r\n<html>", b"x"),
    "json": (b"HTTP/1.1 200 OK\r\nContent-Type: application/json\r\n\r\n{", b" "),
    "header": (b"HTTP/1.1 200 OK\r\nX-Slow: ", b"a"),
    "status-line": (b"HTTP/1.1 200 ", b"O"),
}


def parse_args() -> argparse.Namespace:
    p = argparse.ArgumentParser(description="quirky SGLang-shaped test server")
    p.add_argument("--endless", choices=sorted(ENDLESS), default="")
    p.add_argument("--html-200", action="store_true")
    p.add_argument("--host", default="127.0.0.1")
    p.add_argument("--port", type=int, required=True)
    p.add_argument("-t", "--threads", type=int, default=1, help="ignored")
    p.add_argument("--model", default="quirky", help="ignored (names the process for the tests)")
    p.add_argument("--drop-reused", action="store_true")
    p.add_argument("--close-header", action="store_true")
    p.add_argument("--buffered", action="store_true", default=os.environ.get("QUIRKY_BUFFERED") == "1")
    p.add_argument("--hang-after", type=int, default=0)
    p.add_argument("--tokens-per-chunk", type=int, default=1)
    p.add_argument("--no-counts", action="store_true")
    p.add_argument("--token-delay-s", type=float, default=0.0)
    p.add_argument("--split-writes", action="store_true")
    p.add_argument("--crlf", action="store_true")
    p.add_argument("--close-delimited", action="store_true")
    p.add_argument("--gzip-header", action="store_true")
    p.add_argument("--count-factor", type=float, default=1.0)
    p.add_argument("--extra-tokens", type=int, default=0)
    p.add_argument("--prompt-tokens-offset", type=int, default=None)
    p.add_argument("--echo-auth", action="append", choices=("401", "500", "info"), default=[])
    p.add_argument("--echo-form", choices=("raw", "url", "base64"), default="raw")
    return p.parse_args()


ARGS = parse_args()
# /generate requests seen so far (one event loop: no lock needed).
GENERATED = [0]


async def read_request(reader: asyncio.StreamReader) -> tuple[str, str, bytes, dict[str, str]] | None:
    """(method, path, body, headers by lower-case name)."""
    line = await reader.readline()
    if not line:
        return None
    method, path, _ = line.decode().split(" ", 2)
    headers = {}
    while True:
        header = await reader.readline()
        if header in (b"\r\n", b"\n", b""):
            break
        name, _, value = header.decode().partition(":")
        headers[name.strip().lower()] = value.strip()
    length = int(headers.get("content-length", "0"))
    body = await reader.readexactly(length) if length else b""
    return method, path, body, headers


async def endless(writer: asyncio.StreamWriter) -> None:
    first, unit = ENDLESS[ARGS.endless]
    writer.write(first)
    while True:
        await asyncio.sleep(0.05)
        writer.write(unit)
        await writer.drain()


async def html_200(writer: asyncio.StreamWriter, headers: dict[str, str]) -> None:
    page = f"<html><body><h1>Sign in</h1><p>Your request ({headers.get('authorization', '')}) needs a session.</p>"
    body = (page + "</body></html>\n").encode()
    writer.write(head("200 OK", "text/html; charset=utf-8", f"Content-Length: {len(body)}\r\n\r\n") + body)
    await writer.drain()


def quoted(value: str) -> str:
    if ARGS.echo_form == "url":
        return urllib.parse.quote(value, safe="")
    if ARGS.echo_form == "base64":
        return base64.b64encode(value.encode()).decode()
    return value


def head(status: str, content_type: str, extra: str = "") -> bytes:
    connection = "close" if ARGS.close_header or ARGS.close_delimited else "keep-alive"
    return (
        f"HTTP/1.1 {status}\r\nContent-Type: {content_type}\r\nConnection: {connection}\r\n"
        f"Keep-Alive: timeout=60\r\n{extra}"
    ).encode()


async def send_json(writer: asyncio.StreamWriter, status: str, obj: object) -> None:
    body = json.dumps(obj).encode()
    writer.write(head(status, "application/json", f"Content-Length: {len(body)}\r\n\r\n") + body)
    await writer.drain()


async def send_chunk(writer: asyncio.StreamWriter, data: bytes) -> None:
    if ARGS.crlf:
        data = data.replace(b"\n", b"\r\n")
    frame = data if ARGS.close_delimited else f"{len(data):x}\r\n".encode() + data + b"\r\n"
    if ARGS.split_writes and len(frame) > 8:
        cut = len(frame) // 2
        writer.write(frame[:cut])
        await writer.drain()
        await asyncio.sleep(0.01)
        frame = frame[cut:]
    writer.write(frame)
    await writer.drain()


class Held:
    """A writer that keeps what is written (``--buffered``): the answer leaves in one write."""

    def __init__(self) -> None:
        self.data = bytearray()

    def write(self, data: bytes) -> None:
        self.data += data

    async def drain(self) -> None:
        pass


async def generate(writer: asyncio.StreamWriter, body: bytes) -> None:
    if ARGS.buffered:
        held = Held()
        await stream(held, body)  # type: ignore[arg-type]
        writer.write(bytes(held.data))
        await writer.drain()
    else:
        await stream(writer, body)
    if ARGS.close_delimited:
        writer.close()


async def stream(writer: asyncio.StreamWriter, body: bytes) -> None:
    request = json.loads(body or b"{}")
    params = request.get("sampling_params", {})
    total = int(params.get("max_new_tokens", 16)) + ARGS.extra_tokens
    framing = "\r\n" if ARGS.close_delimited else "Transfer-Encoding: chunked\r\n\r\n"
    encoding = "Content-Encoding: gzip\r\n" if ARGS.gzip_header else ""
    writer.write(head("200 OK", "text/event-stream", encoding + framing))
    sent = 0
    while sent < total:
        if ARGS.hang_after and sent >= ARGS.hang_after:
            await asyncio.sleep(3600)
        sent = min(total, sent + ARGS.tokens_per_chunk)
        meta: dict[str, object] = {"id": "q", "finish_reason": {"type": "length"} if sent == total else None}
        if not ARGS.no_counts:
            meta["completion_tokens"] = round(sent * ARGS.count_factor)
        if ARGS.prompt_tokens_offset is not None:
            meta["prompt_tokens"] = len(request.get("input_ids", [])) + ARGS.prompt_tokens_offset
        event = {"text": "x" * sent, "meta_info": meta}
        await send_chunk(writer, b"data: " + json.dumps(event).encode() + b"\n\n")
        if ARGS.token_delay_s:
            await asyncio.sleep(ARGS.token_delay_s)
    await send_chunk(writer, b"data: [DONE]\n\n")
    if not ARGS.close_delimited:
        await send_chunk(writer, b"")


async def handle(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
    served = 0
    try:
        while True:
            request = await read_request(reader)
            if request is None:
                break
            if ARGS.drop_reused and served:
                # Close without answering: the client had every reason to reuse this connection.
                writer.transport.abort()
                return
            method, path, body, headers = request
            auth = quoted(headers.get("authorization", ""))
            generated = path == "/generate" and method == "POST"
            if generated:
                GENERATED[0] += 1
            if path in ("/health", "/health_generate"):
                await send_json(writer, "200 OK", {})
            elif path == "/server_info" and "info" in ARGS.echo_auth:
                print(f"request headers: Authorization: {auth}", flush=True)
                await send_json(writer, "200 OK", {"version": "9.9.9-quirky", "last_request_header": auth})
            elif generated and "401" in ARGS.echo_auth:
                await send_json(writer, "401 Unauthorized", {"detail": f"invalid credentials in header: {auth}"})
            elif generated and "500" in ARGS.echo_auth and GENERATED[0] % 4 == 0:
                await send_json(writer, "500 Internal Server Error", {"error": f"upstream said no to {auth}"})
            elif path == "/v1/models":
                await send_json(writer, "200 OK", {"object": "list", "data": [{"id": "quirky"}]})
            elif path == "/version":
                await send_json(writer, "200 OK", {"version": "9.9.9-quirky"})
            elif generated and ARGS.endless:
                await endless(writer)
            elif generated and ARGS.html_200:
                await html_200(writer, headers)
            elif generated:
                await generate(writer, body)
            else:
                await send_json(writer, "404 Not Found", {"detail": "Not Found"})
            served += 1
            if ARGS.close_header or ARGS.close_delimited:
                break
    except (ConnectionError, asyncio.IncompleteReadError):
        pass
    finally:
        writer.close()


async def main() -> None:
    server = await asyncio.start_server(handle, ARGS.host, ARGS.port)
    print(f"quirky server listening on {ARGS.host}:{ARGS.port}", flush=True)
    async with server:
        await server.serve_forever()


if __name__ == "__main__":
    asyncio.run(main())
