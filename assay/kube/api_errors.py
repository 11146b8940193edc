"""An API request that failed, as the API server's Status object says: code, reason, message, details.

Callers decide on `reason` (NotFound, AlreadyExists, Conflict, Forbidden, Invalid,
TooManyRequests, ...) or `code`, never on the words of a body. An answer that is no Status
(a proxy's, a load balancer's) gets the reason client-go gives its code, so a 404 from
anywhere is NotFound.
"""

from __future__ import annotations

import json
from typing import Any, TypedDict, cast

NOT_FOUND = "NotFound"
ALREADY_EXISTS = "AlreadyExists"
CONFLICT = "Conflict"
FORBIDDEN = "Forbidden"
INVALID = "Invalid"
BAD_REQUEST = "BadRequest"
TOO_LARGE = "RequestEntityTooLarge"
TOO_MANY_REQUESTS = "TooManyRequests"
SERVICE_UNAVAILABLE = "ServiceUnavailable"
NAMESPACE_TERMINATING = "NamespaceTerminating"
"""A cause's reason (details.causes), under Forbidden: a create in a namespace being deleted."""

REASON_OF_CODE = {
    400: BAD_REQUEST,
    401: "Unauthorized",
    403: FORBIDDEN,
    404: NOT_FOUND,
    405: "MethodNotAllowed",
    406: "NotAcceptable",
    409: CONFLICT,
    410: "Gone",
    413: TOO_LARGE,
    415: "UnsupportedMediaType",
    422: INVALID,
    429: TOO_MANY_REQUESTS,
    500: "InternalError",
    503: SERVICE_UNAVAILABLE,
    504: "Timeout",
}
"""client-go's reasons for an error answer that carries no Status (NewGenericServerResponse)."""
BODY_CHARS = 2000
"""How much of an answer that is no Status is kept, to quote."""


class StatusCause(TypedDict, total=False):
    reason: str
    message: str
    field: str


class StatusDetails(TypedDict, total=False):
    name: str
    group: str
    kind: str
    uid: str
    causes: list[StatusCause]
    retryAfterSeconds: int


class Status(TypedDict, total=False):
    """meta/v1 Status: what the API server answers an error with."""

    apiVersion: str
    kind: str
    status: str
    message: str
    reason: str
    code: int
    details: StatusDetails


class ApiError(Exception):
    """An error answer of the API server (HTTP status >= 400)."""

    def __init__(
        self,
        *,
        code: int,
        reason: str,
        message: str = "",
        details: StatusDetails | None = None,
        body: str = "",
        retry_after: str | None = None,
    ) -> None:
        super().__init__(f"{code} {reason or 'error'}: {(message or body)[:500]}")
        self.code, self.reason, self.message = code, reason, message
        """The HTTP status; Status.reason (else the code's); Status.message ("" when the answer is no Status)."""
        self.details: StatusDetails = details or {}
        self.body = body
        """The answer itself, bounded, when it is no Status (a proxy's page): what to quote then."""
        self.retry_after = retry_after
        """The Retry-After header, if the answer had one."""

    def has_cause(self, reason: str) -> bool:
        return any(cause.get("reason") == reason for cause in self.details.get("causes") or ())


class Refused(ApiError):
    """An object the API server refused for what it is (`refusals`): sending it again changes nothing."""

    def __init__(self, error: ApiError, *, said: str) -> None:
        super().__init__(
            code=error.code,
            reason=error.reason,
            message=error.message,
            details=error.details,
            body=error.body,
            retry_after=error.retry_after,
        )
        self.said = said
        """The API server's message, one bounded line."""


def from_answer(code: int, data: bytes, *, retry_after: str | None = None) -> ApiError:
    """The ApiError of one error answer: its Status read once, here."""
    text = data.decode(errors="replace")
    status = _status(text)
    if status is None:
        return ApiError(code=code, reason=REASON_OF_CODE.get(code, ""), body=text[:BODY_CHARS], retry_after=retry_after)
    details = status.get("details")
    return ApiError(
        code=code,
        reason=str(status.get("reason") or REASON_OF_CODE.get(code, "")),
        message=str(status.get("message") or ""),
        details=details if isinstance(details, dict) else None,
        retry_after=retry_after,
    )


def _status(text: str) -> Status | None:
    try:
        answer: Any = json.loads(text)
    except ValueError:
        return None
    return cast(Status, answer) if isinstance(answer, dict) and answer.get("kind") == "Status" else None
