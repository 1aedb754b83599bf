"""Redact secrets (tokens, keys, passwords) from command lines and mappings before they
are written to run.json, report.json or a trace's meta log.

A name looks secret when one of its words (split at ``-``, ``_``, ``.``, camelCase) is a
secret word (``token``, ``key``, ``secret``, ``password``, ...), it contains ``secret``,
``passw`` or ``apikey``, or it ends in ``token``: ``--api-key``, ``--hf_token``,
``HF_TOKEN``, ``DB_PASSWORD``, ``aws_secret_access_key``, ``GITHUBTOKEN``.  Counts and
tools are not secrets: ``--max-tokens``, ``--tokenizer``, ``--num-keys`` stay.  Its value becomes ``***``.  Credentials inside URLs
(``https://user:pass@host``) are redacted too.
"""

from __future__ import annotations

import re
from typing import Any

REDACTED = "***"
SECRET_WORDS = frozenset({
    "token", "key", "apikey", "secret", "secrets", "password", "passwd", "passphrase",
    "credential", "credentials", "auth", "authorization", "cookie", "privatekey",
    "accesskey", "secretkey", "bearer", "jwt",
})
SECRET_INFIXES = ("secret", "passw", "apikey", "api_key", "api-key", "credential")
SECRET_SUFFIXES = ("token", "apikey", "accesskey", "secretkey", "privatekey", "password",
                   "passwd")
_WORD_SPLIT = re.compile(r"[-_.\s]+|(?<=[a-z])(?=[A-Z])")
_URL_CREDENTIALS = re.compile(r"(?P<scheme>[A-Za-z][A-Za-z0-9+.-]*://)(?P<user>[^/@:\s]*):"
                              r"(?P<password>[^/@\s]+)@")
_ENV_ASSIGNMENT = re.compile(r"^(?P<name>[A-Za-z_][A-Za-z0-9_]*)=(?P<value>.*)$", re.DOTALL)


def is_secret_name(name: str) -> bool:
    """Does ``name`` (an option, a variable, a key) look like it holds a secret?"""
    bare = name.lstrip("-").strip()
    if not bare:
        return False
    lower = bare.lower()
    if any(part in lower for part in SECRET_INFIXES) or lower.endswith(SECRET_SUFFIXES):
        return True
    return any(w.lower() in SECRET_WORDS for w in _WORD_SPLIT.split(bare) if w)


def redact_text(text: str) -> str:
    """``text`` with the passwords of URLs in it replaced."""
    if "://" not in text:
        return text
    return _URL_CREDENTIALS.sub(lambda m: f"{m['scheme']}{m['user']}:{REDACTED}@", text)


def redact_argv(argv: list[str] | tuple[str, ...]) -> list[str]:
    """A copy of ``argv`` whose secret values read ``***``.

    Handles ``--api-key=xyz``, ``--api-key xyz`` (the next argument), ``HF_TOKEN=xyz``
    (an environment assignment, as for ``env``) and URLs with credentials.  Arguments
    after a bare ``--`` are treated the same way (they are a command too).
    """
    out: list[str] = []
    hide_next = False
    for arg in argv:
        arg = str(arg)
        if hide_next:
            hide_next = False
            if not arg.startswith("-") or arg == "-":
                out.append(REDACTED)
                continue
        if arg.startswith("-") and arg != "--":
            name, eq, _value = arg.partition("=")
            if is_secret_name(name):
                if eq:
                    out.append(f"{name}={REDACTED}")
                else:
                    out.append(arg)
                    hide_next = True
                continue
        else:
            m = _ENV_ASSIGNMENT.match(arg)
            if m and is_secret_name(m["name"]):
                out.append(f"{m['name']}={REDACTED}")
                continue
        out.append(redact_text(arg))
    return out


def _redact_value(value: Any, depth: int) -> Any:
    if depth > 32:
        return value
    if isinstance(value, dict):
        return _redact_dict(value, depth + 1)
    if isinstance(value, (list, tuple)):
        items = [_redact_value(v, depth + 1) for v in value]
        if items and all(isinstance(v, str) for v in items):
            return redact_argv(items)  # an argv-like list of strings
        return items
    if isinstance(value, str):
        return redact_text(value)
    return value


def _redact_dict(d: dict[Any, Any], depth: int) -> dict[Any, Any]:
    return {k: (REDACTED if isinstance(k, str) and is_secret_name(k) and v not in (None, "")
                else _redact_value(v, depth))
            for k, v in d.items()}


def redact_mapping(d: dict[Any, Any]) -> dict[Any, Any]:
    """A copy of ``d`` (an environment, a config, a report section) with the values of
    secret-looking keys replaced by ``***``, nested dicts and lists included; lists of
    strings are redacted as command lines."""
    return _redact_dict(dict(d), 0)
