"""Domain errors. Services raise them; the API turns them into ``{"error", "message"}`` JSON."""
from __future__ import annotations

from typing import Any


class StudyError(Exception):
    status = 400
    code = "bad_request"

    def __init__(self, message: str, *, code: str | None = None, details: dict[str, Any] | None = None) -> None:
        super().__init__(message)
        self.message = message
        if code:
            self.code = code
        self.details = details or {}


class BadInput(StudyError):
    status = 400
    code = "bad_input"


class Unauthorised(StudyError):
    status = 401
    code = "unauthorised"


class Forbidden(StudyError):
    status = 403
    code = "forbidden"


class NotFound(StudyError):
    status = 404
    code = "not_found"


class Conflict(StudyError):
    status = 409
    code = "conflict"


class TooLarge(StudyError):
    status = 413
    code = "too_large"


class Unavailable(StudyError):
    """Try again later (the answer carries ``Retry-After`` from services.platform.backpressure); nothing
    the client sent was lost."""

    status = 503
    code = "unavailable"


class Gone(StudyError):
    status = 410
    code = "gone"
