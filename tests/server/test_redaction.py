"""The run's secret registry: whatever the text and however it is cut, no known secret survives.

A secret cut by a line break (a server log wrapping a long line) is no longer the secret: the
two halves are ordinary text and cannot be told from it, so it is not claimed here. Cut between
two *reads* of one line it is caught (the log copy releases whole lines; the file writer holds
back the last characters of each piece).
"""

from __future__ import annotations

import base64
import json
import string
from urllib.parse import quote, quote_plus

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from perfgate._redact import (
    MIN_PIECE_CHARS,
    MIN_SECRET_CHARS,
    REDACTED,
    SecretRegistry,
    looks_secret,
    marker_for,
    without_userinfo,
)
from perfgate.errors import ServerError
from perfgate.profile import ServerSpec
from perfgate.server._secrets import ServerKeys

secrets = st.text(min_size=MIN_SECRET_CHARS, max_size=40)
texts = st.text(max_size=200)


def _registry(*values: str) -> SecretRegistry:
    reg = SecretRegistry()
    for v in values:
        reg.add(v)
    return reg


@settings(max_examples=300)
@given(secret=secrets, before=texts, after=texts)
def test_a_secret_anywhere_in_a_text_is_gone(secret: str, before: str, after: str) -> None:
    out = _registry(secret).text(before + secret + after)
    assert secret not in out


@settings(max_examples=300)
@given(values=st.lists(secrets, min_size=1, max_size=4), pieces=st.lists(texts, min_size=1, max_size=5))
def test_several_secrets_overlapping_or_next_to_the_marker_are_all_gone(values: list[str], pieces: list[str]) -> None:
    # Secrets between pieces of text that may hold parts of them, or of the marker itself.
    text = "".join(p + values[i % len(values)] for i, p in enumerate(pieces)) + REDACTED[:5]
    out = _registry(*values).text(text)
    assert not [v for v in values if v in out]


@settings(max_examples=300)
@given(secret=secrets, before=texts, after=texts, user=st.text(max_size=12))
def test_the_encodings_a_server_echoes_are_gone_too(secret: str, before: str, after: str, user: str) -> None:
    reg = _registry(secret)
    basic = base64.b64encode(f"{user}:{secret}".encode()).decode()
    for form in (quote(secret, safe=""), quote_plus(secret), json.dumps(secret)[1:-1], basic):
        out = reg.text(before + form + after)
        assert form not in out
    # base64 at any alignment: the encoding of the secret's bytes no longer decodes to the secret.
    for lead in range(3):
        encoded = base64.b64encode(b"x" * lead + secret.encode() + b"y").decode()
        assert encoded not in reg.text(encoded)


def test_a_basic_header_loses_its_whole_base64_word() -> None:
    """The part of base64 that depends only on the key is found; the characters around it encode
    the key's first and last bytes (here "Bearer sk" and "00"), so the whole word goes."""
    key = "sk-perfgate-test-0123456789-00"
    header = "Authorization: Basic " + base64.b64encode(f"Bearer {key}".encode()).decode() + "\r\nX: 1"
    reg = _registry(key)
    assert reg.text(header) == "Authorization: Basic <redacted>\r\nX: 1"
    assert "".join(reg.stream([header[:25], header[25:40], header[40:]])) == reg.text(header)
    assert b"".join(reg.redact_lines([header[:30].encode(), header[30:].encode()])) == reg.text(header).encode()


@settings(max_examples=300)
@given(
    # Keys (the text around the word shares no character with them).
    secret=st.text(string.ascii_letters + string.digits + "-_.~", min_size=MIN_SECRET_CHARS, max_size=40),
    lead=st.binary(max_size=20),
    trail=st.binary(max_size=20),
    before=st.text(' :,"{}', max_size=20),
    after=st.text(' :,"{}', max_size=20),
    cuts=st.lists(st.integers(0, 300), max_size=4),
)
def test_base64_of_a_secret_among_any_bytes_is_redacted_to_its_word_edges(
    secret: str, lead: bytes, trail: bytes, before: str, after: str, cuts: list[int]
) -> None:
    word = base64.b64encode(lead + secret.encode() + trail).decode()
    text = before + word + after
    reg = _registry(secret)
    out = reg.text(text)
    # Nothing of the word is left, whatever the alignment; the text around it is untouched.
    assert out == before + marker_for(reg.values) + after
    bounds = sorted({min(c, len(text)) for c in cuts})
    assert "".join(reg.stream([text[a:b] for a, b in zip([0, *bounds], [*bounds, len(text)])])) == out


@settings(max_examples=300)
@given(secret=secrets, text=texts, cuts=st.lists(st.integers(0, 300), max_size=6))
def test_a_text_written_in_pieces_is_redacted_as_a_whole(secret: str, text: str, cuts: list[int]) -> None:
    whole = text[: len(text) // 2] + secret + text[len(text) // 2 :]
    bounds = sorted({min(c, len(whole)) for c in cuts})
    pieces = [whole[a:b] for a, b in zip([0, *bounds], [*bounds, len(whole)])]
    out = "".join(_registry(secret).stream(pieces))
    assert secret not in out


@given(text=texts)
def test_a_text_without_secrets_is_unchanged(text: str) -> None:
    reg = _registry("sk-not-in-the-text-\x00")
    assert reg.text(text) == text == "".join(reg.stream([text[:3], text[3:]]))


@settings(max_examples=200)
@given(secret=secrets, before=st.binary(max_size=100), after=st.binary(max_size=100), cut=st.integers(0, 300))
def test_a_server_log_split_over_reads_is_redacted(secret: str, before: bytes, after: bytes, cut: int) -> None:
    data = before.replace(b"\n", b" ") + secret.encode() + after
    out = b"".join(_registry(secret).redact_lines([data[:cut], data[cut:]]))
    # Replacement may only ever remove characters of the secret's own lines.
    if "\n" not in secret:
        assert secret.encode() not in out


def test_a_secret_that_is_part_of_the_marker_gets_another_marker() -> None:
    assert marker_for(["redacted"]) != REDACTED
    out = _registry("redacted", "<redact").text("x<redacted>y")
    assert "redacted" not in out and "<redact" not in out


def test_short_values_are_not_redacted_from_all_text_and_short_keys_are_refused(monkeypatch) -> None:
    assert _registry("1").text("a 1 b") == "a 1 b"
    monkeypatch.setenv("PG_SHORT", "k3y")
    with pytest.raises(ServerError, match=r"the key in PG_SHORT is 3 characters long; .* use a longer key"):
        ServerKeys.from_spec(ServerSpec(kind="sglang", model_path="/m", api_key_env="PG_SHORT"))


@pytest.mark.parametrize(
    ("name", "value", "secret"),
    [
        ("HF_TOKEN", "hf_x", True),
        ("AWS_SECRET_ACCESS_KEY", "abc", True),
        ("DB_PASSWORD", "x", True),
        ("OPENAI_API_KEY", "sk-1", True),
        ("CACHE_URL", "redis://user:pw@host:1/0", True),
        ("EXTRA_HEADER", "Bearer abc", True),
        ("CUDA_VISIBLE_DEVICES", "0,1", False),
        ("SGLANG_FLAG", "http://host:1/x", False),
        ("PLAIN", "", False),
    ],
)
def test_secret_looking_env(name: str, value: str, secret: bool) -> None:
    assert looks_secret(name, value) is secret


@settings(max_examples=300)
@given(
    user=st.text(st.characters(blacklist_categories=["Zs", "Cc"], blacklist_characters="/"), max_size=10),
    password=st.text(st.characters(blacklist_categories=["Zs", "Cc", "Zl", "Zp"]), min_size=1, max_size=20),
)
def test_a_url_is_shown_without_its_credentials(user: str, password: str) -> None:
    assert without_userinfo(f"http://{user}:{password}@127.0.0.1:9/v1") == f"http://{REDACTED}@127.0.0.1:9/v1"


# -- a text cut for a message (redacted whole, then cut) ------------------------------------------


def _pieces_at_end(out: str, secret: str) -> list[str]:
    return [secret[:n] for n in range(MIN_PIECE_CHARS, len(secret) + 1) if out.endswith(secret[:n])]


@settings(max_examples=300)
@given(secret=secrets, before=texts, after=texts, limit=st.integers(0, 260))
def test_a_text_cut_for_a_message_keeps_no_piece_of_a_secret(secret: str, before: str, after: str, limit: int) -> None:
    out = _registry(secret).clip(before + secret + after, limit)
    assert secret not in out
    assert not _pieces_at_end(out, secret)
    assert len(out) <= limit + len(REDACTED)


@settings(max_examples=300)
@given(secret=secrets, before=texts, after=texts, limit=st.integers(0, 260))
def test_the_end_of_a_text_cut_for_a_message_starts_with_no_piece_of_a_secret(
    secret: str, before: str, after: str, limit: int
) -> None:
    out = _registry(secret).clip(before + secret + after, limit, tail=True)
    assert secret not in out
    assert not [secret[-n:] for n in range(MIN_PIECE_CHARS, len(secret) + 1) if out.startswith(secret[-n:])]


def test_a_key_quoted_across_the_cut_is_not_shown_in_part() -> None:
    # The audit's case: a key at character 260 of an answer cut at 300 showed 40 of its 41 characters.
    key = "sk-live-" + "0123456789abcdef0123456789abcdef0"
    answer = "x" * 260 + key + " was refused"
    out = _registry(key).clip(answer, 300)
    assert out == "x" * 260 + REDACTED + " was refused"
    # An answer the server (or a bound on what is read) cut inside the key loses that piece too.
    assert _registry(key).clip(answer[:280], 300) == "x" * 260 + REDACTED
    assert _registry(key).clip(answer[:263], 300) == answer[:263]  # 3 characters say nothing of it


def test_a_piece_of_a_base64_form_takes_its_whole_word() -> None:
    secret = "user:hunter2-correct-horse"
    encoded = base64.b64encode(secret.encode()).decode()
    out = _registry(secret).clip(f"Authorization: Basic {encoded[:20]}", 100)
    assert out == f"Authorization: Basic {REDACTED}"
