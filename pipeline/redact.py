"""Keep credentials out of logged params, the logged config and console output."""

from __future__ import annotations

import re
from typing import Any
from urllib.parse import parse_qsl, urlencode, urlsplit

MASK = "***"
# A key is secret when one of its words is, or two adjacent words make a secret name (api_key):
# whole words only, so `author` or `tokenizer` stay readable.
SECRET_WORDS = frozenset({
    "password", "passwd", "pwd", "passphrase", "token", "secret", "secrets", "credential", "credentials",
    "apikey", "auth", "authorization", "bearer", "cookie", "signature",
})
SECRET_PAIRS = frozenset({("api", "key"), ("private", "key"), ("access", "key"), ("secret", "key"),
                          ("client", "secret"), ("session", "key"), ("sas", "key")})
_WORD = re.compile(r"[A-Z]?[a-z0-9]+|[A-Z]+(?![a-z])")
URI_WITH_USER = re.compile(r"\b([a-zA-Z][a-zA-Z0-9+.\-]*://)([^/\s:@]+):([^/\s@]+)@")


def key_words(key: str) -> list[str]:
    """The words of a key's last segment: `db.apiToken` -> [api, token], `AWS_SECRET_KEY` -> [aws, secret, key]."""
    return [w.lower() for w in _WORD.findall(str(key).rsplit(".", 1)[-1])]


def is_secret_key(key: str) -> bool:
    words = key_words(key)
    return any(w in SECRET_WORDS for w in words) or any(pair in SECRET_PAIRS for pair in zip(words, words[1:]))


def redact_uri(uri: str) -> str:
    """scheme://user:password@host/...?token=x -> scheme://user:***@host/...?token=***

    Only the secret parts are replaced: a URI without any comes back as it was, byte for byte
    (re-assembling `sqlite:////abs/path` from its parts would drop slashes).
    """
    if not isinstance(uri, str) or "://" not in uri:
        return uri
    try:
        parts = urlsplit(uri)
    except ValueError:
        return URI_WITH_USER.sub(lambda m: f"{m.group(1)}{m.group(2)}:{MASK}@", uri)
    out = uri
    if "@" in parts.netloc:
        userinfo, host = parts.netloc.rsplit("@", 1)
        user = userinfo.split(":", 1)[0]
        masked = f"{user}:{MASK}@{host}" if ":" in userinfo else f"{MASK}@{host}"
        out = out.replace(parts.netloc, masked, 1)
    if parts.query:
        pairs = parse_qsl(parts.query, keep_blank_values=True)
        if any(is_secret_key(k) for k, _ in pairs):
            query = urlencode([(k, MASK if is_secret_key(k) else v) for k, v in pairs], safe="*")
            head, _, tail = out.partition("?" + parts.query)
            out = f"{head}?{query}{tail}"
    return out


def redact_text(text: str) -> str:
    """Credentials inside URIs anywhere in a line of text."""
    return URI_WITH_USER.sub(lambda m: f"{m.group(1)}{m.group(2)}:{MASK}@", text)


def redact(value: Any, key: str = "") -> Any:
    """A copy of a (nested) config value with secrets masked."""
    if key and is_secret_key(key) and value not in (None, ""):
        return MASK
    if isinstance(value, dict):
        return {k: redact(v, str(k)) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return type(value)(redact(v) for v in value)
    if isinstance(value, str):
        return redact_uri(value) if "://" in value else value
    return value


def flatten(tree: Any, prefix: str = "") -> dict[str, Any]:
    """{'a': {'b': 1}} -> {'a.b': 1}; lists stay values."""
    out: dict[str, Any] = {}
    if isinstance(tree, dict):
        for k, v in tree.items():
            key = f"{prefix}.{k}" if prefix else str(k)
            if isinstance(v, dict) and v:
                out.update(flatten(v, key))
            else:
                out[key] = v
    else:
        out[prefix] = tree
    return out


def redact_override(override: str) -> str:
    """key=value from the command line, with a secret value or a URI's password masked."""
    key, sep, value = override.partition("=")
    if not sep:
        return override
    if is_secret_key(key.lstrip("+~")):
        return f"{key}={MASK}"
    return f"{key}={redact_text(value)}"
