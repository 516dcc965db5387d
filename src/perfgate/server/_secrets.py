"""The server's API keys: read from the environment, sent where needed, never recorded.

A profile names environment variables (``[server] api_key_env``, ``admin_api_key_env``),
never a key. perfgate reads the keys once, when the server is started or attached (the running
server carries them, and every stage gets its headers from it), registers them with the
process's secret registry there and nowhere else, hands them to an SGLang it launches as
``--api-key`` / ``--admin-api-key``, sends them as bearer tokens, and replaces them with
``<redacted>`` in everything it records: the launch command, the environment it added, the
server's /server_info (SGLang returns ``api_key`` and the launch command in clear), error
messages and the server log it captures (SGLang logs its server args, keys included).
"""

from __future__ import annotations

import os
import re
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from perfgate._redact import MIN_SECRET_CHARS, REDACTED, SECRETS, looks_secret
from perfgate.errors import ServerError
from perfgate.profile import ServerSpec

# Server flags whose value is a credential, whatever the value is.
SECRET_FLAGS = ("--api-key", "--admin-api-key")
# Keys of JSON objects (SGLang's server args) whose value is a credential.
_SECRET_KEY = re.compile(r"(?:^|_)(?:api_key|token|secret|password)$", re.IGNORECASE)


def read_key(variable: str, setting: str) -> str:
    """The value of environment ``variable`` named by ``[server] setting``; ServerError when unset."""
    value = os.environ.get(variable, "")
    if not value:
        raise ServerError(
            f"[server] {setting} = {variable!r}: the environment variable {variable} is not set (or empty); "
            "export the server's key there before running perfgate"
        )
    check_key(value, f"[server] {setting} = {variable!r}: the key in {variable}")
    # The one place a key becomes known: from here on nothing printed or written shows it.
    SECRETS.add(value)
    return value


def check_key(value: str, what: str) -> None:
    """ServerError when ``value`` is too short to be found and redacted in output reliably."""
    if len(value) < MIN_SECRET_CHARS:
        raise ServerError(
            f"{what} is {len(value)} characters long; perfgate redacts keys from everything it prints and "
            f"writes, and needs at least {MIN_SECRET_CHARS} characters to tell a key from ordinary text: "
            "use a longer key"
        )


@dataclass(frozen=True)
class ServerKeys:
    """The bearer tokens of one server: ``api_key`` for serving endpoints, ``admin_api_key`` for
    admin ones (SGLang's /flush_cache accepts only the admin key once one is set)."""

    api_key: str = ""
    admin_api_key: str = ""

    @classmethod
    def from_spec(cls, spec: ServerSpec) -> ServerKeys:
        return cls(
            read_key(spec.api_key_env, "api_key_env") if spec.api_key_env else "",
            read_key(spec.admin_api_key_env, "admin_api_key_env") if spec.admin_api_key_env else "",
        )

    def headers(self, *, admin: bool = False) -> dict[str, str]:
        token = (self.admin_api_key or self.api_key) if admin else self.api_key
        return {"Authorization": f"Bearer {token}"} if token else {}

    def server_flags(self) -> list[str]:
        """SGLang's flags that hand it the keys."""
        flags = []
        if self.api_key:
            flags += ["--api-key", self.api_key]
        if self.admin_api_key:
            flags += ["--admin-api-key", self.admin_api_key]
        return flags


@dataclass(frozen=True)
class Redactor:
    """Redacts the secrets the process's registry knows (the keys :func:`read_key` read, the env
    and URL secrets found elsewhere), and the values of secret flags and keys."""

    @property
    def active(self) -> bool:
        """Whether there is anything to redact (the server's output must then go through a pipe)."""
        return bool(SECRETS.values)

    def text(self, text: str) -> str:
        return SECRETS.text(text)

    def clip(self, text: str, limit: int) -> str:
        """``text`` cut for a message, with these and the registry's secrets redacted first."""
        return SECRETS.clip(text, limit)

    def argv(self, argv: Sequence[str]) -> list[str]:
        out: list[str] = []
        hide_next = False
        for token in argv:
            if hide_next:
                out.append(REDACTED)
                hide_next = False
                continue
            flag, eq, _ = token.partition("=")
            if flag in SECRET_FLAGS:
                out.append(f"{flag}={REDACTED}" if eq else token)
                hide_next = not eq
                continue
            out.append(self.text(token))
        return out

    def env(self, env: Mapping[str, str]) -> dict[str, str]:
        """``env`` with credentials (by name or content, see :func:`looks_secret`) replaced."""
        SECRETS.add_env(dict(env))
        return {k: REDACTED if looks_secret(k, v) or v in SECRETS.values else self.text(v) for k, v in env.items()}

    def json(self, obj: Any) -> Any:
        """A copy of JSON-like ``obj`` with secret keys' values and every secret occurrence redacted."""
        if isinstance(obj, dict):
            return {
                k: (REDACTED if v and isinstance(k, str) and _SECRET_KEY.search(k) else self.json(v))
                for k, v in obj.items()
            }
        if isinstance(obj, list):
            return [self.json(v) for v in obj]
        if isinstance(obj, str):
            return self.text(obj)
        return obj

    def lines(self, chunks: Iterable[bytes]) -> Iterable[bytes]:
        return SECRETS.redact_lines(chunks)
