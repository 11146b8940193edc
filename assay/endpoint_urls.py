"""The rules for a URL that names a model server, wherever one is taken.

A URL's userinfo (`https://user:pw@host/v1`) is a credential written where it gets copied
everywhere: the results JSON, status.model, every score series, the logs. It is refused
wherever a URL is taken (the operator's policy, the chart's admission policy, `assay run`'s
model_args), never stripped silently.

An origin (scheme, host, port) is whom a bearer token is sent to: a redirect to another
origin would hand the token to a server the user never named.

An admin's prefix bounds a URL textually, as the chart's admission policy (CEL) can check
it too: scheme, host and port exactly as written, and the path at a `/` (or `?`) boundary,
with no dot segments that would climb out of it. Both sides apply the same cases
(tests/operator/admission/test_operator_admission_policy.py).
"""

from __future__ import annotations

import re
import urllib.parse

from assay.errors import UserError

_DEFAULT_PORTS = {"http": 80, "https": 443}
# `/..`, `/.` as a whole segment, or percent-encoded dots, which a server may decode into one.
_DOT_SEGMENT = re.compile(r"/\.\.?(?:[/?#]|$)|%2[eE]")


def has_userinfo(url: str) -> bool:
    """Whether the authority part (between `//` and the first `/`, `?` or `#`) holds an `@`."""
    return "@" in urllib.parse.urlsplit(url).netloc


def origin(url: str) -> tuple[str, str, int | None]:
    """(scheme, host, port) as the request goes out: lower case, the scheme's port if none is given."""
    parts = urllib.parse.urlsplit(url)
    scheme = parts.scheme.lower()
    try:
        port = parts.port
    except ValueError:
        port = None
    return scheme, (parts.hostname or "").lower(), port if port is not None else _DEFAULT_PORTS.get(scheme)


def show_origin(url: str) -> str:
    """The origin as a user reads it: `https://host:443`."""
    scheme, host, port = origin(url)
    return f"{scheme}://{host}" + (f":{port}" if port is not None else "")


def within(url: str, prefix: str) -> bool:
    """Whether `url` is `prefix` or below it at a path boundary, without dot segments."""
    if _DOT_SEGMENT.search(url):
        return False
    boundary = prefix if prefix.endswith("/") else prefix + "/"
    return url == prefix or url.startswith(boundary) or url.startswith(prefix + "?")


def redacted(url: str) -> str:
    """`url` with any userinfo replaced by `***`: for names shown where a refused URL may still be read."""
    parts = urllib.parse.urlsplit(url)
    if "@" not in parts.netloc:
        return url
    return urllib.parse.urlunsplit(parts._replace(netloc="***@" + parts.netloc.rpartition("@")[2]))


def refuse_userinfo(base_url: str) -> None:
    """A model_args base_url with a user name or password is refused, not stripped: the URL is
    copied into the results JSON and every log line naming it."""
    if has_userinfo(base_url):
        raise UserError(
            f"model_args base_url {redacted(base_url)!r} has a user name or password in it: remove them, "
            "and give the API key in the OPENAI_API_KEY environment variable."
        )
