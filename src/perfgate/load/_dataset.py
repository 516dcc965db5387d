"""Seeded prompts for a workload: bench_serving's random, generated-shared-prefix and ShareGPT datasets.

Prompts are token ids wherever the backend takes them, so lengths are exact. ``random``
draws ids uniformly; ``shared-prefix`` gives each of ``num_groups`` groups one system prompt
(the same in every repeat and in the warmup, as a deployment's system prompts are) followed
by a fresh question per request; ``sharegpt`` reads the first two turns of conversations
from a local file with bench_serving's filters; ``multi-turn`` gives chat sessions whose turn k
resends the session's k-1 earlier user messages and replies, then a new user message. Lengths
follow the workload's distribution: uniform in [range_ratio x len, len] (bench_serving's),
normal, lognormal or a histogram.
"""

from __future__ import annotations

import functools
import hashlib
import math
import os
import random
import re
import zlib
from array import array
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass

from perfgate import _json
from perfgate._files import read_bytes
from perfgate._json import JSONInputError
from perfgate.errors import LoadError
from perfgate.profile import LengthDist, Workload

Tokenizer = Callable[[Sequence[str]], list[list[int]]]
"""Token ids of each text, in order (the server's tokenizer, :class:`~perfgate.load.ServerTokenizer`)."""

# Ids inside every common tokenizer's vocabulary and clear of the special tokens that most
# tokenizers put at the low end; a profile overrides this for small vocabularies.
DEFAULT_TOKEN_ID_RANGE = (1000, 30000)
_WORDS = ("alpha", "bravo", "charlie", "delta", "echo", "foxtrot", "golf", "hotel", "india", "juliet")
# GPT-2's pre-tokenizer pattern (letters approximated by [^\W\d_]): contractions, words and
# numbers with their leading space, punctuation runs, whitespace. A BPE tokenizer splits text
# at these boundaries first, so one piece is one token or a little more.
_PIECES = re.compile(r"'s|'t|'re|'ve|'m|'ll|'d| ?[^\W\d_]+| ?\d+| ?[^\s\w]+|\s+(?!\S)|\s+")


@dataclass(frozen=True, slots=True)
class RequestSpec:
    """One request: its prompt as token ids, its output length, and (ShareGPT) its original text.

    Multi-turn: ``session`` (>= 0) and ``turn`` place it in its chat session, and ``pieces`` are
    the lengths of the prompt's messages in order (user, assistant, user, ..., user).
    """

    input_ids: Sequence[int]
    output_len: int
    prompt_text: str = ""
    session: int = -1
    turn: int = 0
    pieces: tuple[int, ...] = ()

    def __post_init__(self) -> None:
        # Two or four bytes a token: 100,000 prompts of 256 tokens take 50-100 MB until each is
        # sent, not the 0.9 GB of lists of Python ints.
        if not isinstance(self.input_ids, array):
            ids = self.input_ids
            object.__setattr__(self, "input_ids", array("H" if max(ids, default=0) < 65536 else "I", ids))

    @property
    def input_len(self) -> int:
        return len(self.input_ids)

    def text(self) -> str:
        """The prompt for chat backends: the conversation's own text, else one common word per token
        id (lengths are then the server's count of that text)."""
        return self.prompt_text or _words(self.input_ids)

    def messages(self) -> list[dict[str, str]]:
        """The prompt as chat messages: the multi-turn history as alternating user and assistant
        messages, else one user message."""
        if not self.pieces:
            return [{"role": "user", "content": self.text()}]
        out, at = [], 0
        for k, n in enumerate(self.pieces):
            out.append({"role": "assistant" if k % 2 else "user", "content": _words(self.input_ids[at : at + n])})
            at += n
        return out


def _words(ids: Sequence[int]) -> str:
    return " ".join(_WORDS[i % len(_WORDS)] for i in ids)


def text_to_ids(text: str, id_range: tuple[int, int] = DEFAULT_TOKEN_ID_RANGE) -> list[int]:
    """``text`` as token ids without a tokenizer: one id per pre-token piece, from a stable hash.

    The same text always gives the same ids (so shared text is a shared prefix for a prefix
    cache); the count is about what a BPE tokenizer gives for English (usually 10-30 % fewer).
    """
    lo, hi = id_range
    return [lo + zlib.crc32(piece.encode()) % (hi - lo) for piece in _PIECES.findall(text)]


def _rng(workload: Workload, seed_offset: int, stream: str = "") -> random.Random:
    # Python seeds str deterministically (sha512), unlike hash().
    return random.Random(
        f"{workload.seed * 1_000_003 + seed_offset}/{stream}" if stream else workload.seed * 1_000_003 + seed_offset
    )


def draw_length(rng: random.Random, n: int, range_ratio: float, dist: LengthDist | None) -> int:
    """One length: bench_serving's uniform [int(n * ratio), n] (never 0) unless ``dist`` says otherwise."""
    if dist is None:
        return max(1, rng.randint(int(n * range_ratio), n))
    if dist.kind == "histogram":
        lo, hi, _ = rng.choices(dist.bins, weights=[w for _, _, w in dist.bins])[0]
        return rng.randint(lo, hi)
    x: float
    if dist.kind == "normal":
        x = rng.gauss(n, dist.stddev)
    else:
        # Mean m and stddev s of the lengths: the log's sigma^2 = ln(1 + s^2 / m^2), mu = ln m - sigma^2 / 2.
        sigma2 = math.log1p((dist.stddev / n) ** 2)
        x = rng.lognormvariate(math.log(n) - sigma2 / 2, math.sqrt(sigma2))
    top = dist.max if dist.max is not None else math.inf
    return int(min(max(round(x), dist.min), top))


def _input_len(rng: random.Random, w: Workload) -> int:
    return draw_length(rng, w.input_len or 0, w.range_ratio, w.input_len_distribution)


def _output_len(rng: random.Random, w: Workload) -> int:
    return draw_length(rng, w.output_len or 0, w.range_ratio, w.output_len_distribution)


def _random(workload: Workload, count: int, seed_offset: int) -> list[RequestSpec]:
    rng = _rng(workload, seed_offset)
    lo, hi = workload.token_id_range or DEFAULT_TOKEN_ID_RANGE
    out = []
    for _ in range(count):
        n_in = _input_len(rng, workload)
        n_out = _output_len(rng, workload)
        out.append(RequestSpec([rng.randrange(lo, hi) for _ in range(n_in)], n_out))
    return out


def system_prompts(workload: Workload) -> list[list[int]]:
    """The shared-prefix groups' system prompts: from the seed alone, the same in every repeat."""
    rng = _rng(workload, 0, "system-prompts")
    lo, hi = workload.token_id_range or DEFAULT_TOKEN_ID_RANGE
    lengths = [
        max(1, rng.randint(int(workload.system_prompt_len * workload.range_ratio), workload.system_prompt_len))
        for _ in range(workload.num_groups)
    ]
    return [[rng.randrange(lo, hi) for _ in range(n)] for n in lengths]


def _shared_prefix(workload: Workload, count: int, seed_offset: int) -> list[RequestSpec]:
    """bench_serving's generated-shared-prefix: requests spread evenly over the groups, in shuffled order."""
    prompts = system_prompts(workload)
    rng = _rng(workload, seed_offset)
    groups = [i % workload.num_groups for i in range(count)]
    rng.shuffle(groups)
    lo, hi = workload.token_id_range or DEFAULT_TOKEN_ID_RANGE
    out = []
    for g in groups:
        question = [rng.randrange(lo, hi) for _ in range(_input_len(rng, workload))]
        out.append(RequestSpec(prompts[g] + question, _output_len(rng, workload)))
    return out


def _multi_turn(workload: Workload, count: int, seed_offset: int) -> list[RequestSpec]:
    """Chat sessions of ``num_turns`` requests (the last one shorter when ``count`` is not a
    multiple), session by session. Turn k's prompt is turn k-1's prompt, its reply and a new user
    message; the reply is ``output_len`` seeded ids standing in for the server's answer (its
    length is exact, its text is not the server's: a server that caches its own output finds
    the history up to the previous prompt)."""
    rng = _rng(workload, seed_offset, "multi-turn")
    lo, hi = workload.token_id_range or DEFAULT_TOKEN_ID_RANGE
    turns = max(1, workload.num_turns)
    out: list[RequestSpec] = []
    for session in range(-(-count // turns)):
        history: list[int] = []
        pieces: tuple[int, ...] = ()
        for turn in range(min(turns, count - session * turns)):
            question = [rng.randrange(lo, hi) for _ in range(_input_len(rng, workload))]
            output_len = _output_len(rng, workload)
            prompt = history + question
            pieces = (*pieces, len(question))
            out.append(RequestSpec(prompt, output_len, session=session, turn=turn, pieces=pieces))
            history = prompt + [rng.randrange(lo, hi) for _ in range(output_len)]
            pieces = (*pieces, output_len)
    return out


def session_offsets_s(workload: Workload, specs: list[RequestSpec]) -> list[float]:
    """Each request's send offset: arrival_offsets_s per request, or for multi-turn per session
    (its first turn's; a later turn waits for the turn before it and the think time instead)."""
    if workload.dataset != "multi-turn":
        return arrival_offsets_s(workload, len(specs))
    starts = arrival_offsets_s(workload, max((s.session for s in specs), default=-1) + 1)
    return [starts[s.session] for s in specs]


@dataclass(frozen=True)
class _Conversation:
    prompt: str
    answer: str
    # Counted without a server (text_to_ids).
    prompt_ids: tuple[int, ...]
    answer_len: int


def _turn_text(turn: object) -> str | None:
    value = turn.get("value") if isinstance(turn, dict) else None
    return value if isinstance(value, str) else None


@functools.lru_cache(maxsize=4)
def _read_sharegpt(
    path: str, id_range: tuple[int, int], _stamp: tuple[float, int]
) -> tuple[tuple[_Conversation, ...], str]:
    """Every conversation of a ShareGPT file with at least two turns, as (prompt, answer) of its first
    two (bench_serving's rule), tokenized once; and the file's sha256. ``_stamp`` (mtime, size)
    makes an edited file read again."""
    try:
        raw = read_bytes(path)
    except OSError as e:
        raise LoadError(
            f"dataset_path {path}: cannot be read ({e.strerror or e}); point dataset_path at a local ShareGPT JSON file"
        ) from None
    try:
        # Not strict: a public dataset may repeat a key, and perfgate reads two fields of it.
        data = _json.loads(raw, strict=False)
    except JSONInputError as e:
        raise LoadError(
            f"dataset_path {path}: {e}; expected ShareGPT's format, a list of "
            f'{{"conversations": [{{"from": ..., "value": ...}}, ...]}}'
        ) from None
    if not isinstance(data, list):
        raise LoadError(
            f"dataset_path {path}: expected a JSON list of conversations (ShareGPT's format), got a "
            f"{type(data).__name__}"
        )
    out = []
    for item in data:
        turns = item.get("conversations", item.get("conversation", [])) if isinstance(item, dict) else []
        if not isinstance(turns, list) or len(turns) < 2:
            continue
        prompt, answer = _turn_text(turns[0]), _turn_text(turns[1])
        if prompt is None or answer is None:
            continue
        ids = tuple(text_to_ids(prompt, id_range))
        out.append(_Conversation(prompt, answer, ids, len(text_to_ids(answer, id_range))))
    return tuple(out), hashlib.sha256(raw).hexdigest()


def _sharegpt_file(workload: Workload) -> tuple[tuple[_Conversation, ...], str]:
    path = workload.dataset_path
    try:
        st = os.stat(path)
    except OSError as e:
        raise LoadError(
            f"workload {workload.name}: dataset_path {path}: {e.strerror or e}; point dataset_path at a local "
            "ShareGPT JSON file (nothing is downloaded)"
        ) from None
    try:
        return _read_sharegpt(path, workload.token_id_range or DEFAULT_TOKEN_ID_RANGE, (st.st_mtime, st.st_size))
    except LoadError as e:
        raise LoadError(f"workload {workload.name}: {e}") from None


def _sharegpt(
    workload: Workload, count: int, seed_offset: int, tokenizer: Tokenizer | None = None
) -> list[RequestSpec]:
    """bench_serving's sample_sharegpt_requests: shuffle, then keep conversations whose prompt and
    output have at least 2 tokens and whose sum fits context_len, until ``count`` are kept.
    With ``tokenizer`` (tokenize = "server") the lengths and prompt ids are the server's."""
    conversations, _ = _sharegpt_file(workload)
    order = list(range(len(conversations)))
    _rng(workload, seed_offset).shuffle(order)
    counted = (
        ((i, conversations[i].prompt_ids, conversations[i].answer_len) for i in order)
        if tokenizer is None
        else _server_counted(tokenizer, conversations, order)
    )
    out: list[RequestSpec] = []
    for i, prompt_ids, answer_len in counted:
        if len(out) == count:
            break
        output_len = workload.output_len or answer_len
        if len(prompt_ids) < 2 or output_len < 2:
            continue
        if workload.context_len and len(prompt_ids) + output_len > workload.context_len:
            continue
        out.append(RequestSpec(list(prompt_ids), output_len, conversations[i].prompt))
    if len(out) < count:
        raise LoadError(
            f"workload {workload.name}: dataset_path {workload.dataset_path} has {len(out)} usable conversations "
            f"(of {len(conversations)} with two turns; prompt and output of >= 2 tokens"
            + (f", together <= context_len {workload.context_len}" if workload.context_len else "")
            + (", counted by the server" if tokenizer is not None else "")
            + f"), {count} are needed; lower num_prompts or use a larger file"
        )
    return out


# Conversations sent to the tokenizer at once, in shuffled order: bench_serving's filter stops
# when enough are kept, so a large file is tokenized only as far as it is read.
_TOKENIZE_AHEAD = 256


def _server_counted(
    tokenizer: Tokenizer, conversations: Sequence[_Conversation], order: list[int]
) -> Iterator[tuple[int, Sequence[int], int]]:
    """(index, prompt ids, answer length) of each conversation in ``order``, counted by ``tokenizer``.

    Asked afresh for every set of requests, never cached: the server is the authority, and
    another server (an A/B's candidate) may tokenize otherwise.
    """
    for start in range(0, len(order), _TOKENIZE_AHEAD):
        ahead = order[start : start + _TOKENIZE_AHEAD]
        ids = tokenizer([text for i in ahead for text in (conversations[i].prompt, conversations[i].answer)])
        for k, i in enumerate(ahead):
            yield i, array("I", ids[2 * k]), len(ids[2 * k + 1])


_DATASETS = {"random": _random, "shared-prefix": _shared_prefix, "sharegpt": _sharegpt, "multi-turn": _multi_turn}


def make_requests(
    workload: Workload, count: int, *, seed_offset: int = 0, tokenizer: Tokenizer | None = None
) -> list[RequestSpec]:
    """``count`` requests for ``workload``; the same workload and offset always give the same prompts.

    ``tokenizer``: the server's, for a ShareGPT workload with tokenize = "server" (required then).
    """
    if workload.dataset == "sharegpt" and workload.tokenize == "server":
        if tokenizer is None:
            raise LoadError(f'workload {workload.name}: tokenize = "server" needs the server\'s tokenizer')
        return _sharegpt(workload, count, seed_offset, tokenizer)
    return _DATASETS[workload.dataset](workload, count, seed_offset)


def dataset_identity(workload: Workload) -> dict[str, str]:
    """What a fingerprint needs beyond the workload's keys: a ShareGPT file's content digest
    (its path may differ between hosts, its content must not). LoadError for an unusable file."""
    if workload.dataset != "sharegpt":
        return {}
    _, digest = _sharegpt_file(workload)
    return {"dataset_sha256": digest[:16]}


def check_dataset(workload: Workload) -> None:
    """Raise LoadError now, before any server boots, if the workload's prompts cannot be made (only a
    file can fail: the synthetic datasets always can). With tokenize = "server" only the file is
    read: its lengths are counted once the server is up."""
    if workload.dataset == "sharegpt":
        if workload.tokenize == "server":
            _sharegpt_file(workload)
        else:
            make_requests(workload, workload.num_prompts)


def arrival_offsets_s(workload: Workload, count: int) -> list[float]:
    """Send time of each request relative to the start: all at 0 for rate inf, else Poisson or constant gaps."""
    rate = workload.request_rate
    if rate == float("inf"):
        return [0.0] * count
    if workload.pacing == "constant":
        return [i / rate for i in range(count)]
    rng = random.Random(workload.seed * 7_919 + 17)
    t, out = 0.0, []
    for _ in range(count):
        out.append(t)
        t += rng.expovariate(rate)
    return out
