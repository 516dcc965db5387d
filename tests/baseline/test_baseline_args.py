from __future__ import annotations

import random

import pytest
from hypothesis import assume, given
from hypothesis import strategies as st

from perfgate.baseline import normalize_args


def test_equivalent_command_lines_normalize_the_same() -> None:
    a = ["--tp", "8", "--mem-fraction-static", "0.90", "--disable-cuda-graph", "--port", "30000", "--host", "0.0.0.0"]
    b = ["--disable-cuda-graph=True", "--mem-fraction-static=0.9", "--tensor-parallel-size=8", "--log-level", "debug"]
    assert (
        normalize_args(a)
        == normalize_args(b)
        == (
            "--disable-cuda-graph=true",
            "--mem-fraction-static=0.9",
            "--tp-size=8",
        )
    )


@pytest.mark.parametrize(
    ("args", "expected"),
    [
        (["--tp-size", "4"], ("--tp-size=4",)),
        (["--tp=4"], ("--tp-size=4",)),
        (["--tensor_parallel_size", "4"], ("--tp-size=4",)),
        (["--dp", "2", "--ep", "8"], ("--dp-size=2", "--ep-size=8")),
        (["--nsa-decode-backend", "trtllm"], ("--dsa-decode-backend=trtllm",)),
        (["--chunked-prefill-size", "-1"], ("--chunked-prefill-size=-1",)),
        (["--cuda-graph-bs", "1", "2", "4"], ("--cuda-graph-bs=1 2 4",)),
        (["--no-enable-prefix-caching"], ("--enable-prefix-caching=false",)),
        (["--max-running-requests", "64", "--max-running-requests", "1024"], ("--max-running-requests=1024",)),
        (["--api-key", "secret", "--enable-metrics", "--served-model-name", "glm"], ()),
        (["--model-path", "/m", "--trust-remote-code"], ("--trust-remote-code=true",)),
        (["serve", "--tp", "2"], ("serve", "--tp-size=2")),
    ],
)
def test_normalization_rules(args: list[str], expected: tuple[str, ...]) -> None:
    assert normalize_args(args) == expected


def test_performance_flags_are_kept() -> None:
    fast = normalize_args(["--max-running-requests", "1024"])
    slow = normalize_args(["--max-running-requests", "64"])
    assert fast != slow


KNOWN_FLAGS = [
    "--tp",
    "--tp-size",
    "--tensor-parallel-size",
    "--dp-size",
    "--ep",
    "--mem-fraction-static",
    "--max-running-requests",
    "--chunked-prefill-size",
    "--cuda-graph-bs",
    "--disable-cuda-graph",
    "--disable-radix-cache",
    "--nsa-decode-backend",
    "--dsa-prefill-backend",
    "--enable-prefix-caching",
    "--no-enable-prefix-caching",
    "--attention-backend",
    "--port",
    "--host",
    "--log-level",
    "--api-key",
    "--Moe_Runner_Backend",
    "-tp",
]
flag_names = st.sampled_from(KNOWN_FLAGS) | st.text("abcxyz-", min_size=1, max_size=8).map(lambda t: "--x" + t)
values = st.one_of(
    st.none(),  # a boolean flag
    st.integers(-5, 5000).map(str),
    st.floats(0.001, 100, allow_nan=False).map(lambda f: f"{f:.3f}"),
    st.sampled_from(["true", "False", "yes", "off", "trtllm", "flashinfer", "a=b", "1 2 4", "1e3", "+7", "007"]),
    st.text("abc/._0123", min_size=1, max_size=8),
)
flag_sets = st.dictionaries(flag_names, values, max_size=8)


def _tokens(flags: dict[str, str | None], forms: list[bool]) -> list[list[str]]:
    groups = []
    for (name, value), eq in zip(flags.items(), forms):
        if value is None:
            groups.append([name])
        elif eq:
            groups.append([f"{name}={value}"])
        else:
            groups.append([name, *value.split(" ")])
    return groups


@given(flag_sets, st.data())
def test_idempotent(flags: dict[str, str | None], data: st.DataObject) -> None:
    forms = data.draw(st.lists(st.booleans(), min_size=len(flags), max_size=len(flags)))
    once = normalize_args([t for g in _tokens(flags, forms) for t in g])
    assert normalize_args(once) == once


@given(flag_sets, st.data(), st.randoms(use_true_random=False))
def test_order_and_spelling_invariant(flags: dict[str, str | None], data: st.DataObject, rnd: random.Random) -> None:
    # Flags that are aliases of one another would make "last one wins" order-dependent.
    names = [normalize_args([n])[0].split("=")[0] if normalize_args([n]) else n for n in flags]
    assume(len(set(names)) == len(names))
    n = len(flags)
    forms_a = data.draw(st.lists(st.booleans(), min_size=n, max_size=n))
    forms_b = data.draw(st.lists(st.booleans(), min_size=n, max_size=n))
    a = _tokens(flags, forms_a)
    b = _tokens(flags, forms_b)
    rnd.shuffle(b)
    assert normalize_args([t for g in a for t in g]) == normalize_args([t for g in b for t in g])
