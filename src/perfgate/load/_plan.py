"""What every client process needs to run one repeat of a workload, built once."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass

from perfgate.load._backends import Backend
from perfgate.load._selfcheck import ClientLimits
from perfgate.load._tokenize import ServerTokenizer
from perfgate.profile import Workload
from perfgate.server import Redactor


@dataclass(frozen=True)
class LoadPlan:
    """One repeat of ``workload`` against ``base_url``.

    Built once by :func:`~perfgate.load.run_workload` (the backend included) and handed as is
    to every shard's process, so all of them speak to the server in exactly the same way.
    ``seed_offset`` gives each repeat its own prompts.
    """

    base_url: str
    workload: Workload
    backend: Backend
    headers: Mapping[str, str]
    limits: ClientLimits
    seed_offset: int
    keep_alive: bool
    # The cache flush's headers (an admin endpoint); None: the requests' own.
    flush_headers: Mapping[str, str] | None = None

    @property
    def tokenizer(self) -> ServerTokenizer | None:
        """The server's tokenizer, for a workload that counts its text with it (tokenize = "server")."""
        if self.workload.tokenize != "server":
            return None
        return ServerTokenizer(self.base_url, tuple(self.headers.items()), self.backend.model)

    @property
    def redactor(self) -> Redactor:
        """Hides the bearer tokens the requests carry in anything quoted from the server."""
        headers = [*self.headers.values(), *(self.flush_headers or {}).values()]
        return Redactor(tuple(v.removeprefix("Bearer ") for v in headers if v.startswith("Bearer ")))

    @property
    def url(self) -> str:
        """Where the generation requests go."""
        return self.base_url.rstrip("/") + self.backend.path
