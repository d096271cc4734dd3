"""A development bearer token for the local resolver API.

Generated once into ``.local/api-token`` (mode 0600, never in the repository). The
API is configured with the token's SHA-256 only, the way a deployment would be, as
``admin`` on every tenant: the local pipeline (the demo, the agents' progress reports
and retained-event reads, an operator trying the API) does everything with it.
"""

from __future__ import annotations

import os
import secrets

from infra.local.layout import Layout
from schemas.http.auth import token_hash

__all__ = ["dev_token", "dev_token_grant", "token_hash"]


def dev_token(layout: Layout) -> str:
    path = layout.local / "api-token"
    if not path.exists():
        layout.local.mkdir(parents=True, exist_ok=True)
        fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
        with os.fdopen(fd, "w") as handle:
            handle.write(secrets.token_urlsafe(32))
    return path.read_text().strip()


def dev_token_grant(token: str) -> str:
    """The ``GAPLESS_API_TOKENS`` entry of the dev token: admin on every tenant."""
    return f"{token_hash(token)}:*=admin"
