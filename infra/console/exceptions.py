"""The console's own errors, each with its stable code and the HTTP status the page
answers with. Role and tenant refusals are the APIs' (``ROLE_DENIED``,
``TENANT_SCOPE_DENIED``), and a module's refusal keeps its module's code
(``QUARANTINE_ENTRY_NOT_OPEN``, ``JOB_NOT_FOUND`` …)."""

from __future__ import annotations

from schemas.errors import GaplessError


class ConsoleError(GaplessError):
    code = "CONSOLE_ERROR"
    http_status = 400


class SessionRequired(ConsoleError):
    """No live session: never logged in, logged out, or expired. A page asked for
    sends the person to the login form."""

    code = "SESSION_REQUIRED"
    http_status = 401


class LoginRefused(ConsoleError):
    """The token is not one of ``GAPLESS_API_TOKENS``, or the name is missing."""

    code = "LOGIN_REFUSED"
    http_status = 401


class CsrfTokenInvalid(ConsoleError):
    """A state-changing form without this session's CSRF token: forged, or from
    another (older) session. Nothing was done."""

    code = "CSRF_TOKEN_INVALID"
    http_status = 403


class FormInvalid(ConsoleError):
    """A field of a form or a query that does not parse (an id, a stream, a duration)."""

    code = "FORM_INVALID"
    http_status = 422


class ReasonEmpty(FormInvalid):
    """The action is audited with a reason, and none was given."""

    code = "FORM_REASON_EMPTY"


class ReasonTooLong(FormInvalid):
    code = "FORM_REASON_TOO_LONG"


class FormStale(ConsoleError):
    """The form was made from a state that has changed since (the entries a bulk retry
    showed, a rebuild that has ended, a pause already resumed): nothing was done;
    load the page again."""

    code = "FORM_STALE"
    http_status = 409
