"""tokenize = "server": ShareGPT lengths and prompt ids from the server's own tokenizer (/v1/tokenize)."""

from __future__ import annotations

import json
from collections.abc import Iterator
from contextlib import ExitStack
from dataclasses import replace
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

import pytest

from perfgate.errors import LoadError
from perfgate.load import ServerTokenizer, check_dataset, make_requests, run_workload
from perfgate.profile import Workload
from perfgate.server import start_server
from tests.load.test_dataset import conv, sharegpt_file
from tests.support import loopback_http, sim_spec

# The simulator counts one token per whitespace-separated word; the approximate count splits
# punctuation off ("a,b,c,d" is 7 pieces): the two disagree on every prompt below.
CONVERSATIONS = [
    conv("a,b,c,d e", "one two three"),
    conv("why,oh,why does it stop", "it,does not"),
    conv("short", "x y"),  # one word: too short for bench_serving's filter when the server counts
    conv("p,q,r s t u", "w o r d s"),
]


@pytest.fixture(scope="module")
def sim(tmp_path_factory):
    with ExitStack() as stack:
        yield start_server(sim_spec(), log_dir=tmp_path_factory.mktemp("sim"), stack=stack)


def sharegpt(tmp_path: Path, **fields: object) -> Workload:
    path = sharegpt_file(tmp_path, CONVERSATIONS)
    fields = {"num_prompts": 3, "concurrency": 2, "warmup_requests": 1, **fields}
    return Workload(name="gpt", dataset="sharegpt", dataset_path=str(path), tokenize="server", **fields)


def test_the_simulator_tokenizes_a_batch_and_one_text_like_sglang(sim):
    tok = ServerTokenizer(sim.base_url, model=sim.model)
    batch = tok(["a,b,c,d e", "one two three", "a,b,c,d e"])
    assert [len(ids) for ids in batch] == [2, 3, 2] and batch[0] == batch[2]
    assert tok([]) == []


def test_server_counted_sharegpt_keeps_the_servers_lengths_and_ids(sim, tmp_path):
    w = sharegpt(tmp_path, context_len=9)
    tok = ServerTokenizer(sim.base_url, model=sim.model)
    specs = make_requests(w, 3, tokenizer=tok)
    by_text = {c["conversations"][0]["value"]: c["conversations"][1]["value"] for c in CONVERSATIONS}
    for spec in specs:
        # The prompt sent as ids is the server's own tokens of the text; the output its answer's count.
        assert list(spec.input_ids) == tok([spec.prompt_text])[0]
        assert spec.output_len == len(by_text[spec.prompt_text].split())
    # "short" is one server token (dropped); the others fit context_len 9 only as the server counts them
    # (5, 6 and 9 tokens with their answers; 11-13 pieces each when approximated).
    assert sorted(s.prompt_text for s in specs) == sorted(t for t in by_text if t != "short")
    with pytest.raises(LoadError, match=r"has 0 usable conversations .*context_len 9\)"):
        make_requests(replace(w, tokenize="approximate"), 3)
    with pytest.raises(LoadError, match=r"has 3 usable conversations .*counted by the server\), 4 are needed"):
        make_requests(w, 4, tokenizer=tok)
    # Before any server is up only the file is read; the counts come later.
    check_dataset(replace(w, num_prompts=50))
    with pytest.raises(LoadError, match='tokenize = "server" needs the server'):
        make_requests(w, 3)


@pytest.mark.parametrize("backend", ["sglang", "openai-chat"])
@pytest.mark.parametrize("processes", [1, 2])
def test_a_sharegpt_workload_runs_with_the_servers_counts(sim, tmp_path, backend, processes):
    w = sharegpt(tmp_path, backend=backend, client_processes=processes)
    run = run_workload(sim.base_url, w, model=sim.model)
    assert all(r.ok for r in run.records), [r.error for r in run.records if r.error]
    words = sorted(len(c["conversations"][0]["value"].split()) for c in CONVERSATIONS if "short" not in str(c))
    counted = sorted(r.input_tokens for r in run.records)
    if backend == "sglang":
        # The ids sent are the server's tokens of each prompt: it counts exactly as many.
        assert counted == words
    else:
        # The chat server counts its template's tokens too: the same few more for every prompt.
        assert len({c - w for c, w in zip(counted, words, strict=True)}) == 1 and counted[0] > words[0]


class _Stub(BaseHTTPRequestHandler):
    """vLLM's shape: no /v1/tokenize, /tokenize takes one string; or a server with no tokenizer at all."""

    mode = "vllm"

    def do_POST(self) -> None:
        body = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
        self.server.seen.append((self.path, self.headers.get("Authorization"), body))  # type: ignore[attr-defined]
        if self.mode == "vllm" and self.path == "/tokenize" and isinstance(body["prompt"], str):
            ids = [len(w) for w in body["prompt"].split()]
            self._answer(200, {"tokens": ids, "count": len(ids), "max_model_len": 2048})
        elif self.mode == "garbled":
            self._answer(200, {"tokens": "nope"})
        else:
            self._answer(404, {"detail": "Not Found"})

    def _answer(self, status: int, doc: object) -> None:
        data = json.dumps(doc).encode()
        self.send_response(status)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)

    def log_message(self, *args: object) -> None:
        pass


@pytest.fixture
def stub() -> Iterator[ThreadingHTTPServer]:
    with loopback_http(_Stub) as server:
        server.seen = []  # type: ignore[attr-defined]
        yield server
    _Stub.mode = "vllm"


def test_a_server_with_one_text_tokenize_is_asked_text_by_text_with_the_key(stub):
    url = f"http://127.0.0.1:{stub.server_address[1]}"
    tok = ServerTokenizer(url, (("Authorization", "Bearer k"),), "m")
    assert tok(["ab c", "dddd"]) == [[2, 1], [4]]
    assert [path for path, _, _ in stub.seen] == ["/v1/tokenize", "/tokenize", "/tokenize"]
    assert all(auth == "Bearer k" and body["model"] == "m" for _, auth, body in stub.seen)


@pytest.mark.parametrize(
    ("mode", "message"),
    [
        ("none", r'/v1/tokenize answered 404, then /tokenize answered 404 .*use tokenize = "approximate"'),
        ("garbled", r"/v1/tokenize answered 200 without 1 lists of token ids under \"tokens\": .*nope"),
    ],
)
def test_a_server_that_cannot_count_is_named_with_what_it_answered(stub, mode, message):
    _Stub.mode = mode
    tok = ServerTokenizer(f"http://127.0.0.1:{stub.server_address[1]}")
    with pytest.raises(LoadError, match=message):
        tok(["some text"])


def test_an_unreachable_server_is_named():
    with pytest.raises(LoadError, match=r'tokenize = "server": cannot reach http://127.0.0.1:9/v1/tokenize'):
        ServerTokenizer("http://127.0.0.1:9")(["x"])
