"""Keep credentials out of logged params, the logged config, run names and console output.

The same rules hold for config values, command-line overrides and free text: values of secret-looking
keys (also inside inline `{k: v}` overrides), every string under a `storage_options` mapping, a URI's
password and secret query parameters (`sig`, `token`...), and secret parts of `k=v;k=v` connection
strings (`AccountKey=`, `SharedAccessSignature=`, `Password=`) become `***`; so do bearer tokens
(`Authorization: Bearer x`), tokens known by their prefix (GitHub `ghp_`, GitLab `glpat-`, Slack `xoxb-`,
AWS access key ids `AKIA...`), a bare SAS query (`sig=x&se=y`), JSON pairs (`{"password": "x"}`) and
command-line options (`--password x`); other text is left as it was.
"""

from __future__ import annotations

import re
from typing import Any
from urllib.parse import unquote_plus, urlsplit

from pipeline.override_text import key_path

MASK = "***"
# A key is secret when one of its words is, or two adjacent words make a secret name (api_key):
# whole words only, so `author` or `tokenizer` stay readable.
SECRET_WORDS = frozenset({
    "password", "passwd", "pwd", "passphrase", "token", "secret", "secrets", "credential", "credentials",
    "apikey", "auth", "authorization", "bearer", "cookie", "signature",
})
SECRET_PAIRS = frozenset({("api", "key"), ("private", "key"), ("access", "key"), ("secret", "key"),
                          ("client", "secret"), ("session", "key"), ("sas", "key"), ("account", "key")})
# Query parameters that carry a credential although their name alone says little elsewhere:
# Azure SAS `sig`, Google `key`, Azure Functions `code`.
QUERY_SECRETS = frozenset({"sig", "key", "code", "jwt"})
STORAGE_OPTIONS = "storage_options"  # fsspec/pandas credentials: every string under it is masked
_WORD = re.compile(r"[A-Z]?[a-z0-9]+|[A-Z]+(?![a-z])")
URI_WITH_USER = re.compile(r"\b([a-zA-Z][a-zA-Z0-9+.\-]*://)([^/\s:@]+):([^/\s@]+)@")
_URI_IN_TEXT = re.compile(r"\b[a-zA-Z][a-zA-Z0-9+.\-]*://[^\s'\"<>;]+")
_QUERY_PAIR = re.compile(r"(^|[&;])([^&;=]+)=([^&;]*)")
# userinfo up to the last @ of the authority: a password may hold an unencoded # or ? (urlsplit would cut it)
_USERINFO = re.compile(r"^([a-zA-Z][a-zA-Z0-9+.\-]*://)([^/\s@]*)@(?=[^/\s@]*(?:[/?#]|$))")
_BEARER = re.compile(r"\b(Bearer|Basic|Token)(\s+)[A-Za-z0-9\-._~+/=]{8,}", re.IGNORECASE)
_TOKEN = re.compile(r"\b(?:gh[pousr]_[A-Za-z0-9]{20,}|github_pat_[A-Za-z0-9_]{20,}|glpat-[A-Za-z0-9_\-]{20,}"
                    r"|xox[abposr]-[A-Za-z0-9\-]{10,}|(?:AKIA|ASIA)[0-9A-Z]{16})\b")
_JSON_PAIR = re.compile(r"""(["'])([^"'\n]{1,64})\1(\s*:\s*)(["'])((?:\\.|(?!\4)[^\\\n])*)\4""")
_CLI_OPTION = re.compile(r"(?<![\w-])(--?[A-Za-z][\w\-]*)(=|\s+)(?!-)(\S+)")
# k=v outside URIs: connection strings (a=1;AccountKey=x), `token=x` in a message, a query without a scheme
_TEXT_PAIR = re.compile(r"(^|[^\w.\-])([A-Za-z][\w.\-]*)=([^;&'\"\n]*)")  # a value may hold spaces


def key_words(key: str) -> list[str]:
    """The words of a key's last segment: `db.apiToken` -> [api, token], `AWS_SECRET_KEY` -> [aws, secret, key]."""
    return [w.lower() for w in _WORD.findall(str(key).rsplit(".", 1)[-1])]


def is_secret_key(key: str) -> bool:
    words = key_words(key)
    return any(w in SECRET_WORDS for w in words) or any(pair in SECRET_PAIRS for pair in zip(words, words[1:]))


def _secret_query_key(key: str) -> bool:
    return is_secret_key(key) or key.strip().lower() in QUERY_SECRETS


def redact_uri(uri: str) -> str:
    """scheme://user:password@host/...?token=x -> scheme://user:***@host/...?token=***

    Only the secret parts are replaced: a URI without any comes back as it was, byte for byte
    (re-assembling `sqlite:////abs/path` from its parts would drop slashes).
    """
    if not isinstance(uri, str) or "://" not in uri:
        return uri
    userinfo = _USERINFO.match(uri)
    if userinfo is not None:  # before urlsplit: an unencoded # or ? in the password would end the netloc
        user, colon, _ = userinfo[2].partition(":")
        uri = f"{userinfo[1]}{f'{user}:{MASK}' if colon else MASK}@{uri[userinfo.end():]}"
    try:
        parts = urlsplit(uri)
    except ValueError:
        return URI_WITH_USER.sub(lambda m: f"{m.group(1)}{m.group(2)}:{MASK}@", uri)
    out = uri
    if parts.query:
        def mask(m: re.Match) -> str:
            return f"{m[1]}{m[2]}={MASK}" if m[3] and _secret_query_key(unquote_plus(m[2])) else m[0]

        query = _QUERY_PAIR.sub(mask, parts.query)
        head, _, tail = out.partition("?" + parts.query)
        out = f"{head}?{query}{tail}"
    return out


def _mask_pairs(text: str) -> str:
    query = "&" in text  # a bare query (sig=x&se=y): its first pair has no ? before it

    def mask(m: re.Match) -> str:
        lead, key, value = m.groups()
        in_query = lead in ("?", "&") or (query and lead in ("", " ", "'", '"'))
        secret = is_secret_key(key) or (in_query and key.lower() in QUERY_SECRETS)
        return f"{lead}{key}={MASK}" if secret and value else m[0]

    return _mask_forms(_TEXT_PAIR.sub(mask, text))


def _mask_forms(text: str) -> str:
    """Bearer tokens, tokens known by their prefix, JSON pairs and command-line options with a secret name."""
    text = _BEARER.sub(lambda m: f"{m[1]}{m[2]}{MASK}", text)
    text = _TOKEN.sub(MASK, text)
    text = _JSON_PAIR.sub(lambda m: f"{m[1]}{m[2]}{m[1]}{m[3]}{m[4]}{MASK}{m[4]}"
                          if is_secret_key(m[2]) and m[5] else m[0], text)
    return _CLI_OPTION.sub(lambda m: f"{m[1]}{m[2]}{MASK}" if is_secret_key(m[1].lstrip("-")) else m[0], text)


def redact_text(text: str) -> str:
    """Credentials in a line of text: inside URIs, and `k=v` pairs with a secret key (connection strings)."""
    if not isinstance(text, str):
        return text
    out, last = [], 0
    for m in _URI_IN_TEXT.finditer(text):
        out += [_mask_pairs(text[last:m.start()]), redact_uri(m.group())]
        last = m.end()
    out.append(_mask_pairs(text[last:]))
    return "".join(out)


class RedactingFilter:
    """A logging filter (Hydra's console and pipeline.log handlers, conf/config.yaml) masking secrets
    in every line: Hydra's launcher prints each job's overrides as typed."""

    def filter(self, record) -> bool:
        message = record.getMessage()
        words = [redact_override(w) if "=" in w and not w.startswith("=") else w for w in message.split(" ")]
        masked = redact_text(" ".join(words))
        if masked != message:
            record.msg, record.args = masked, ()
        return True


def _hidden(value: Any) -> bool:
    """Whether a value under storage_options is masked: everything but flags, null and empty strings."""
    return value not in (None, "") and not isinstance(value, bool)


def redact(value: Any, key: str = "", under_storage: bool = False) -> Any:
    """A copy of a (nested) config value with secrets masked."""
    if key and is_secret_key(key) and value not in (None, ""):
        return MASK
    under = under_storage or str(key).rsplit(".", 1)[-1] == STORAGE_OPTIONS
    if isinstance(value, dict):
        return {k: redact(v, str(k), under) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return type(value)(redact(v, "", under) for v in value)
    if under and _hidden(value):
        return MASK
    if isinstance(value, str):
        return redact_text(value)
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
    """key=value from the command line, with secrets masked as in the config: a secret key's value, the
    values inside `{k: v}` under a secret key or storage_options, URIs' and connection strings' secrets."""
    key, sep, value = override.partition("=")
    if not sep:
        return override
    path = tuple(key_path(key))
    if is_secret_key(path[-1]):
        return f"{key}={MASK}"
    out, last = [], 0
    for start, end, keys in leaves(value):
        out += [value[last:start], _redact_leaf(value[start:end], path + keys)]
        last = end
    return f"{key}={''.join(out)}{value[last:]}"


def _redact_leaf(leaf: str, path: tuple[str, ...]) -> str:
    if leaf in ("", "null"):
        return leaf
    if any(is_secret_key(k) for k in path):
        return MASK
    if STORAGE_OPTIONS in path and leaf.lower() not in ("true", "false"):
        return MASK
    return redact_text(leaf)


def leaves(text: str) -> list[tuple[int, int, tuple[str, ...]]]:
    """(start, end, dict keys above it) of each plain value of an override's value in Hydra's syntax:
    `a`, `a,b` (a sweep), `{k: v}`, `[a, b]`, `choice(a, b)`; quoted strings without their quotes.
    Lenient: text it cannot read ends a value rather than raising."""
    spans: list[tuple[int, int, tuple[str, ...]]] = []
    n = len(text)

    def skip_space(i: int) -> int:
        while i < n and text[i].isspace():
            i += 1
        return i

    def sequence(i: int, keys: tuple, close: str, is_dict: bool = False) -> int:
        """Values separated by commas up to `close` (or the end); in a dict each behind `key:`."""
        stops = "," + close
        while True:
            i = skip_space(i)
            if i >= n:
                return n
            if close and text[i] == close:
                return i + 1
            inner = keys
            if is_dict:
                j = i
                while j < n and text[j] not in ":" + stops:
                    j += 1
                if j >= n or text[j] != ":":  # not `key: value`; read it as a value
                    i = value(i, keys, stops)
                else:
                    inner = (*keys, text[i:j].strip())
                    i = value(j + 1, inner, stops)
            else:
                i = value(i, keys, stops)
            i = skip_space(i)
            if i < n and text[i] == ",":
                i += 1
            elif i < n and close and text[i] == close:
                return i + 1
            elif i < n:
                i += 1  # unreadable: step over it

    def value(i: int, keys: tuple, stops: str) -> int:
        i = skip_space(i)
        if i < n and text[i] == "{":
            return sequence(i + 1, keys, "}", is_dict=True)
        if i < n and text[i] == "[":
            return sequence(i + 1, keys, "]")
        if i < n and text[i] in "'\"":
            j = i + 1
            while j < n and text[j] != text[i]:
                j += 2 if text[j] == "\\" else 1
            spans.append((i + 1, min(j, n), keys))
            return min(j + 1, n)
        j, depth = i, 0
        while j < n:
            c = text[j]
            if c == "\\":
                j += 2
                continue
            if text.startswith("${", j):  # an interpolation is one piece of text
                depth += 1
                j += 2
                continue
            if c == "(" and depth == 0 and re.fullmatch(r"[A-Za-z_]\w*", text[i:j]):
                return sequence(j + 1, keys, ")")  # choice(a, b), range(1, 3)
            if c in "({":
                depth += 1
            elif c in ")}" and depth:
                depth -= 1
            elif c in stops and depth == 0:
                break
            j += 1
        end = min(j, n)
        while end > i and text[end - 1].isspace():
            end -= 1
        if end > i:
            spans.append((i, end, keys))
        return min(j, n)

    sequence(0, (), "")
    return spans
