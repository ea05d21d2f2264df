"""Secrets out of a configuration before it is shown. Pure.

summary.json holds no secret (only the key's variable name and whether it was set), but a report
is pasted into tickets: anything that looks like a credential is replaced, defensively. Token
*counts* (``prompt_tokens``, ``max_tokens``) are configuration, not credentials, and stay.
"""

from __future__ import annotations

import re
from typing import Any
from urllib.parse import urlsplit, urlunsplit

__all__ = ["REDACTED", "is_secret_key", "redact"]

REDACTED = "***"

_SECRET_WORDS = ("authorization", "secret", "password", "passwd", "credential", "bearer", "cookie")
# A key, a token or an auth value: api_key, hf_token, access-token, x_api_key, auth ... but not
# api_key_env (a variable's *name*), api_key_set (a flag) or the *_tokens counts.
_SECRET_NAME = re.compile(r"(^|[_\-.])(api[_\-]?key|key|token|auth|apikey)$")
_SAFE_SUFFIXES = ("_env", "_set", "_name", "_file", "_path", "_var")


def is_secret_key(name: str) -> bool:
    n = name.lower()
    if n.endswith(_SAFE_SUFFIXES):
        return False
    return any(w in n for w in _SECRET_WORDS) or bool(_SECRET_NAME.search(n))


def _strip_userinfo(value: str) -> str:
    """``http://user:pass@host`` -> ``http://***@host``."""
    try:
        parts = urlsplit(value)
    except ValueError:
        return value
    if parts.scheme in ("http", "https") and "@" in parts.netloc:
        host = parts.netloc.rsplit("@", 1)[1]
        return urlunsplit(parts._replace(netloc=f"{REDACTED}@{host}"))
    return value


def redact(value: Any, key: str = "") -> Any:
    """A copy of ``value`` with secret-named entries replaced and URL credentials removed."""
    if key and is_secret_key(key) and value not in (None, "", False):
        return REDACTED
    if isinstance(value, dict):
        return {k: redact(v, str(k)) for k, v in value.items()}
    if isinstance(value, list | tuple):
        return [redact(v) for v in value]
    if isinstance(value, str):
        return _strip_userinfo(value)
    return value
