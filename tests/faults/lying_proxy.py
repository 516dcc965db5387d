"""A proxy in front of an SGLang-shaped server that rewrites the load's answers (issue 34 item 2).

    python tests/faults/lying_proxy.py --upstream http://127.0.0.1:P --port Q [--rewrite one|shift|text]

Every streamed ``/generate`` chunk of a request that asks for no logprobs (the load's) leaves
rewritten; requests asking for logprobs (the correctness probe's, and the scoring of the load's
answers) and every other path pass through unchanged. ``one`` (default): each output id becomes
1000 and the text as many "X" (degenerate: one id throughout). ``shift``: each id becomes the next
one, the text stays (plausible answers of the wrong tokens: only scoring them shows it). ``text``:
the ids stay, the text becomes other words (text that does not spell the ids).
"""

from __future__ import annotations

import argparse
import json

import aiohttp
from aiohttp import web

ONE_ID = 1000
# What a proxy must not copy: aiohttp frames the answer itself.
_HOP = {"content-length", "transfer-encoding", "connection", "content-encoding"}


def _rewrite(line: bytes, how: str) -> bytes:
    if not line.startswith(b"data: {"):
        return line
    obj = json.loads(line[6:])
    if isinstance(obj.get("output_ids"), list):
        n = len(obj["output_ids"])
        if how == "shift":
            obj["output_ids"] = [t + 1 for t in obj["output_ids"]]
        elif how == "text":
            obj["text"] = " lorem" * n
        else:
            obj["output_ids"] = [ONE_ID] * n
            obj["text"] = "X" * n
    return b"data: " + json.dumps(obj, separators=(",", ":")).encode() + b"\n"


async def _forward(request: web.Request) -> web.StreamResponse:
    session: aiohttp.ClientSession = request.app["session"]
    body = await request.read()
    lie = request.path == "/generate" and b'"stream": true' in body and b"return_logprob" not in body
    headers = {k: v for k, v in request.headers.items() if k.lower() not in {"host", *_HOP}}
    url = request.app["upstream"] + request.path_qs
    async with session.request(request.method, url, data=body, headers=headers) as upstream:
        resp = web.StreamResponse(
            status=upstream.status, headers={k: v for k, v in upstream.headers.items() if k.lower() not in _HOP}
        )
        await resp.prepare(request)
        async for line in upstream.content:
            await resp.write(_rewrite(line, request.app["rewrite"]) if lie else line)
        await resp.write_eof()
        return resp


async def _session(app: web.Application) -> object:
    app["session"] = aiohttp.ClientSession(timeout=aiohttp.ClientTimeout(total=None))
    yield
    await app["session"].close()


def main() -> None:
    p = argparse.ArgumentParser()
    p.add_argument("--upstream", required=True)
    p.add_argument("--port", type=int, required=True)
    p.add_argument("--rewrite", choices=("one", "shift", "text"), default="one")
    args = p.parse_args()
    app = web.Application(client_max_size=64 * 1024 * 1024)
    app["upstream"] = args.upstream.rstrip("/")
    app["rewrite"] = args.rewrite
    app.cleanup_ctx.append(_session)
    app.router.add_route("*", "/{tail:.*}", _forward)
    web.run_app(app, host="127.0.0.1", port=args.port, print=None)


if __name__ == "__main__":
    main()
