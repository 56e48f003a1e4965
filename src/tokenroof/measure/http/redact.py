"""Secrets kept out of everything bench writes or prints: the API key, URL userinfo, key-like query values.

A server may echo the key in an error body, and a base URL may carry `user:pass@` or
`?api_key=`; bench stores error texts and URLs, so every string it writes or prints
passes through a `Redactor` first.
"""

from __future__ import annotations

import base64
import json
import re
from dataclasses import dataclass
from typing import Any

from yarl import URL

MASK = "***"
SECRET_NAME = re.compile(r"key|token|secret|pass|pwd|auth|credential|signature|sig$", re.IGNORECASE)
# in free text: scheme://userinfo@ and ?name=value / &name=value where the name looks secret
USERINFO = re.compile(r"(\b[a-zA-Z][a-zA-Z0-9+.-]*://)[^/\s@?#]+@")
QUERY_VALUE = re.compile(r"([?&;]([^=&;\s?#]+)=)([^&;\s#\"'<>]*)")


def secret_values(url: str) -> list[str]:
    """The parts of `url` a server may echo back: the password (and the Basic-auth token made of it), and the
    values of key-like query parameters."""
    try:
        parsed = URL(url.strip())
    except (ValueError, TypeError):
        return []
    values = [v for k, v in parsed.query.items() if SECRET_NAME.search(k)]
    if parsed.password:
        token = base64.b64encode(f"{parsed.user or ''}:{parsed.password}".encode()).decode()
        values += [parsed.password, token]
    return [v for v in values if v]


@dataclass(frozen=True)
class Redactor:
    """Replaces known secret values, URL userinfo and key-like query values with '***'."""

    secrets: tuple[str, ...] = ()

    @classmethod
    def of(cls, url: str, api_key: str | None) -> Redactor:
        values = {*secret_values(url), *([api_key] if api_key else [])}
        # longest first, so a secret containing another is masked whole; with its JSON-escaped form
        forms = {form for v in values for form in (v, json.dumps(v)[1:-1])}
        return cls(tuple(sorted(forms, key=len, reverse=True)))

    def text(self, text: str) -> str:
        for secret in self.secrets:
            text = text.replace(secret, MASK)
        if "@" in text:
            text = USERINFO.sub(rf"\g<1>{MASK}@", text)
        return QUERY_VALUE.sub(self._query, text) if "=" in text else text

    def needed(self, text: str) -> bool:
        """Whether `text` holds anything `text()` would mask (a quick test before redacting a whole object)."""
        if any(secret in text for secret in self.secrets):
            return True
        if "@" in text and USERINFO.search(text):
            return True
        return "=" in text and any(SECRET_NAME.search(m.group(2)) and m.group(3) for m in QUERY_VALUE.finditer(text))

    @staticmethod
    def _query(match: re.Match[str]) -> str:
        return match.group(1) + MASK if SECRET_NAME.search(match.group(2)) and match.group(3) else match.group(0)

    def value(self, value: Any) -> Any:
        """Every string inside a JSON-like value redacted (keys and numbers untouched, so the structure holds)."""
        if isinstance(value, str):
            return self.text(value)
        if isinstance(value, dict):
            return {k: self.value(v) for k, v in value.items()}
        if isinstance(value, list | tuple):
            return [self.value(v) for v in value]
        return value
