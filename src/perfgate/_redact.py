"""The run's secret values, and their redaction from every text perfgate emits.

One registry per process (:data:`SECRETS`), filled as soon as a value is known: the API and
admin keys when the profile's ``*_api_key_env`` variables are read, secret-looking ``[server]
env`` values and an A/B candidate's. Each channel consults it at one place: every file goes
through :func:`perfgate._files.publish`, the pytest reports and the terminal through the
plugin's hooks, the CLI's stdout and stderr through :class:`RedactingStream`, the server log
through :meth:`SecretRegistry.redact_lines`.

A value is also matched in the forms a server may echo it back in: URL-encoded, JSON-escaped
and base64 (a Basic auth header is base64 of ``user:password``; each of base64's three
alignments is matched by the part of the encoding that does not depend on the bytes around
the value, and the whole base64 word around that part is redacted, since its first and last
characters encode the value's first and last bytes). A value cut by a line break (a log
wrapping a long line) is no longer the value and cannot be matched.
"""

from __future__ import annotations

import base64
import json
import re
import threading
from collections.abc import Iterable, Iterator
from typing import IO, Any, AnyStr
from urllib.parse import quote, quote_plus

REDACTED = "<redacted>"
# Shorter values would be found all over ordinary output (and redact it into noise): keys
# that short are refused where they are read, short env values are redacted by name only.
MIN_SECRET_CHARS = 8
# A text cut for a message may end in the first characters of a secret (the server, or a bound
# on what is read, cut it there): from this many on they are redacted. Fewer say next to
# nothing of a key, and would redact ordinary words that happen to start one.
MIN_PIECE_CHARS = 4

# Names of environment variables whose values are credentials, whatever the value is.
SECRET_NAME = re.compile(r"secret|token|key|passw|pwd|credential|auth|cookie", re.IGNORECASE)
# Values that carry a credential whatever the name: a URL with a password, a bearer or Basic
# auth header, a private key block.
SECRET_VALUE = re.compile(r"://[^/@\s:]*:[^/@\s]+@|\bbearer\s+\S|\bbasic\s+[a-z0-9+/=]{8,}|-----BEGIN", re.IGNORECASE)
# The user:password@ of a URL, up to its last "@": a password may hold "@", "/" or "?" (which
# hides the host of a URL with an "@" in its path too; such URLs are only ever shown refused).
_URL_USERINFO = re.compile(r"//\S*@")
_URL_PASSWORD = re.compile(r"//[^/@\s:]*:(\S+)@")


def looks_secret(name: str, value: str) -> bool:
    """Whether env variable ``name`` = ``value`` is a credential (by its name or its content)."""
    return bool(value) and bool(SECRET_NAME.search(name) or SECRET_VALUE.search(value))


def without_userinfo(text: str) -> str:
    """``text`` with the ``user:password@`` of a URL in it replaced by ``<redacted>@``."""
    return _URL_USERINFO.sub(f"//{REDACTED}@", text)


def _base64_cores(data: bytes) -> set[str]:
    """The parts of base64 text that encode ``data`` whatever bytes surround it, one per alignment."""
    cores = set()
    for lead in range(3):
        encoded = base64.b64encode(b"\0" * lead + data).decode()
        # A group of 4 characters encodes 3 bytes; a group shared with surrounding bytes varies.
        start = 4 if lead else 0
        end = (lead + len(data)) // 3 * 4
        core = encoded[start:end]
        if len(core) >= MIN_SECRET_CHARS:
            cores.add(core)
    return cores


def variants(value: str) -> set[str]:
    """``value`` and the encodings a server may echo it back in (see :func:`base64_variants`)."""
    out = {value, quote(value, safe=""), quote(value), quote_plus(value)}
    out |= {json.dumps(value)[1:-1], json.dumps(value, ensure_ascii=False)[1:-1]}
    out |= base64_variants(value)
    return {v for v in out if len(v) >= MIN_SECRET_CHARS}


def base64_variants(value: str) -> set[str]:
    """The base64 forms of ``value``, whose matches widen to the base64 word around them."""
    return _base64_cores(value.encode())


_B64_CHARS = frozenset("ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/=")
_B64_BYTES = frozenset(c.encode()[0] for c in _B64_CHARS)
# A base64 word is widened (and a stream's tail held back) this far at most: a megabyte of
# base64 text in a log does not stall its redaction.
_B64_WORD_MAX = 4096


def _b64_alphabet(text: AnyStr) -> frozenset[Any]:
    return _B64_BYTES if isinstance(text, bytes) else _B64_CHARS


def _word_start(text: AnyStr, at: int, alphabet: frozenset[Any]) -> int:
    """Where the run of base64 characters that ends at ``at`` begins (at most _B64_WORD_MAX back)."""
    stop = max(0, at - _B64_WORD_MAX)
    while at > stop and text[at - 1] in alphabet:
        at -= 1
    return at


def _word_end(text: str, at: int) -> int:
    """Where the run of base64 characters that starts before ``at`` ends (at most _B64_WORD_MAX on)."""
    stop = min(len(text), at + _B64_WORD_MAX)
    while at < stop and text[at] in _B64_CHARS:
        at += 1
    return at


# Brackets for the marker; the first pair whose characters no secret contains is used (then
# private-use code points, which no key holds in practice, and there is always a free one).
_BRACKETS = (("<", ">"), ("[", "]"), ("{", "}"), ("\u00ab", "\u00bb"))


def marker_for(secrets: Iterable[str]) -> str:
    """``<redacted>``, unless a secret could be formed with it. A marker whose first and last
    characters no secret contains can only hold a secret inside its word (one of 8 letters: a
    secret of MIN_SECRET_CHARS is the word itself, and then another word is taken), so no text
    next to a marker can form a secret with it."""
    texts = list(secrets)
    used = set().union(*map(set, texts)) if texts else set()
    spare = (chr(c) for c in range(0xE000, 0x110000) if chr(c) not in used)
    opening, closing = next(((o, c) for o, c in _BRACKETS if o not in used and c not in used), (None, None))
    if opening is None or closing is None:
        opening = next(spare)
        closing = next(spare)
    word = next((w for w in ("redacted", "REDACTED") if not any(s in w for s in texts)), f"red{next(spare)}acted")
    return f"{opening}{word}{closing}"


def _spans(text: AnyStr, secrets: Iterable[AnyStr], words: frozenset[AnyStr] = frozenset()) -> list[tuple[int, int]]:
    """Every occurrence of every secret in ``text``, overlapping ones merged, in order; an
    occurrence of one of ``words`` (base64) covers the whole base64 word around it."""
    found = []
    alphabet = _b64_alphabet(text)
    for secret in secrets:
        at = text.find(secret)
        while at != -1:
            start, end = at, at + len(secret)
            if secret in words:
                start = _word_start(text, start, alphabet)
                limit = min(len(text), end + _B64_WORD_MAX)
                while end < limit and text[end] in alphabet:
                    end += 1
            found.append((start, end))
            at = text.find(secret, at + 1)
    found.sort()
    merged: list[tuple[int, int]] = []
    for start, end in found:
        if merged and start <= merged[-1][1]:
            merged[-1] = (merged[-1][0], max(end, merged[-1][1]))
        else:
            merged.append((start, end))
    return merged


def redact(text: AnyStr, secrets: Iterable[AnyStr], marker: AnyStr, words: frozenset[AnyStr] = frozenset()) -> AnyStr:
    """``text`` with each run of secret occurrences replaced by ``marker`` (``words``: as :func:`_spans`).

    Whole spans are replaced (not one secret after another), so no replacement can join two
    pieces into a secret; ``marker`` must be one :func:`marker_for` chose for these secrets.
    """
    spans = _spans(text, secrets, words)
    if not spans:
        return text
    pieces = []
    done = 0
    for start, end in spans:
        pieces += [text[done:start], marker]
        done = end
    pieces.append(text[done:])
    return text[:0].join(pieces)


class SecretRegistry:
    """The secret values of this process's runs (a value once known stays known)."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._values: frozenset[str] = frozenset()
        self._words: frozenset[str] = frozenset()
        self._marker = REDACTED
        # The same as bytes, for the server log's every line: values, base64 words, marker.
        self._encoded: tuple[frozenset[bytes], frozenset[bytes], bytes] = (frozenset(), frozenset(), b"")

    def add(self, value: str) -> None:
        """Redact ``value`` (and its encodings) from now on; values under MIN_SECRET_CHARS are ignored."""
        if len(value) < MIN_SECRET_CHARS:
            return
        with self._lock:
            self._values = self._values | variants(value)
            self._words = self._words | base64_variants(value)
            self._marker = marker_for(self._values)
            self._encoded = (
                frozenset(v.encode() for v in self._values),
                frozenset(w.encode() for w in self._words),
                self._marker.encode(),
            )

    def add_env(self, env: dict[str, str]) -> None:
        """The secret-looking values of ``env`` (see :func:`looks_secret`), and the password of
        a URL among them on its own (a server may log it apart from the URL)."""
        for name, value in env.items():
            if looks_secret(name, value):
                self.add(value)
                for password in _URL_PASSWORD.findall(value):
                    self.add(password)

    @property
    def values(self) -> frozenset[str]:
        return self._values

    @property
    def longest(self) -> int:
        return max(map(len, self._values), default=0)

    def text(self, text: str) -> str:
        return redact(text, self._values, self._marker, self._words) if self._values else text

    def clip(self, text: str, limit: int, *, tail: bool = False) -> str:
        """At most about ``limit`` characters of a foreign ``text`` for a message: its start (with
        ``tail``, its end), redacted as a whole before it is cut, so that a cut never leaves the
        part of a secret that would no longer be matched. A piece of a secret at the cut (at least
        MIN_PIECE_CHARS of its start at the end; with ``tail``, of its end at the start) is
        redacted too: ``text`` may have been cut before it got here. The marker that replaces
        such a piece may take the result a few characters past ``limit``."""
        redacted = self.text(text)
        kept = redacted[max(0, len(redacted) - limit) :] if tail else redacted[: max(0, limit)]
        piece = self._piece_at_edge(kept, tail)
        if not piece:
            return kept
        return self._marker + kept[piece:] if tail else kept[: len(kept) - piece] + self._marker

    def _piece_at_edge(self, text: str, tail: bool) -> int:
        """How many characters at the end of ``text`` (with ``tail``, at its start) are the start
        (the end) of a secret, MIN_PIECE_CHARS at least; 0 when none are. A piece of a base64 form
        takes the whole base64 word it is in (its edge characters encode the secret's bytes too)."""
        longest = 0
        for value in self._values:
            for n in range(min(len(value), len(text)), MIN_PIECE_CHARS - 1, -1):
                if n <= longest:
                    break
                if text.startswith(value[-n:]) if tail else text.endswith(value[:n]):
                    if value in self._words:
                        n = _word_end(text, n) if tail else len(text) - _word_start(text, len(text) - n, _B64_CHARS)
                    longest = n
                    break
        return longest

    def json(self, obj: Any) -> Any:
        """A copy of JSON-like ``obj`` with every string (keys too) redacted."""
        if isinstance(obj, dict):
            return {self.json(k): self.json(v) for k, v in obj.items()}
        if isinstance(obj, (list, tuple)):
            return [self.json(v) for v in obj]
        if isinstance(obj, str):
            return self.text(obj)
        return obj

    def stream(self, chunks: Iterable[str]) -> Iterator[str]:
        """``chunks`` of one text, redacted as the whole text would be: the last characters of
        each chunk that could begin a secret are held back until the next one is seen."""
        tail = ""
        for chunk in chunks:
            data = tail + chunk
            cut = len(data) - max(self.longest - 1, 0)
            if self._words and 0 < cut < len(data):
                # A base64 word running across the cut may turn out to hold a secret.
                cut = _word_start(data, cut, _B64_CHARS) if data[cut] in _B64_CHARS else cut
            for start, end in _spans(data, self._values, self._words):
                if start < cut < end:
                    cut = start
                    break
            if cut > 0:
                yield self.text(data[:cut])
                tail = data[cut:]
            else:
                tail = data
        if tail:
            yield self.text(tail)

    def redact_lines(self, chunks: Iterable[bytes]) -> Iterator[bytes]:
        """``chunks`` of a byte stream (a server's output) with every secret replaced, released
        one whole line at a time, so a secret split over two reads is still caught."""
        tail = b""
        for chunk in chunks:
            data = tail + chunk
            cut = data.rfind(b"\n") + 1
            tail = data[cut:]
            if cut:
                yield self._bytes(data[:cut])
        if tail:
            yield self._bytes(tail)

    def _bytes(self, data: bytes) -> bytes:
        values, words, marker = self._encoded
        return redact(data, values, marker, words) if values else data


SECRETS = SecretRegistry()


class RedactingStream:
    """A text stream whose every write is redacted (the CLI's stdout/stderr, pytest's terminal)."""

    def __init__(self, stream: IO[str]) -> None:
        self._stream = stream

    def write(self, text: str) -> int:
        self._stream.write(SECRETS.text(text))
        return len(text)

    def __getattr__(self, name: str) -> Any:
        return getattr(self._stream, name)
