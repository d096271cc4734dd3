"""Every error carries one stable code of its own.

Imports every module of the five packages and checks each exception class defined
there: it derives from ``schemas.errors.GaplessError`` (or is one of the few
internal control-flow signals listed below, which carry no code and never leave
their module's caller), defines its own ``code`` in its class body, and no two
classes share a code; an HTTP status, where one is set, is an error status.
"""

from __future__ import annotations

import importlib
import inspect
import pkgutil
import re
from collections.abc import Iterable

from schemas.errors import GaplessError

PACKAGES = ("schemas", "db", "producers", "processors", "infra")

# Raised and caught inside one mechanism to unwind it; never stored or shown.
SIGNALS = {
    "CheckpointLost": "the worker's checkpoint compare-and-set lost: stop this run",
    "RunAborted": "a product's outcome could not be written: stop, replay later",
    "ClaimLost": "the worker no longer holds its job's claim: stop without writing",
    "_Cut": "a product of the worker's batch may depend on an earlier one: end the batch",
    "_Abandon": "the demo workload gives a planned step up",
    "_Failure": "the applier's diagnosis names the event whose projection write failed",
    "_RollBack": "the applier's diagnosing transaction must leave nothing behind",
    "LockNeeded": "a unit's unlocked attempt must be redone under the cursor lock",
}
CODE = re.compile(r"^[A-Z][A-Z0-9]*(?:_[A-Z0-9]+)*$")


def project_exceptions() -> list[type[BaseException]]:
    found: list[type[BaseException]] = []
    for name in PACKAGES:
        package = importlib.import_module(name)
        for info in pkgutil.walk_packages(package.__path__, name + "."):
            if ".migrations" in info.name or info.name.endswith("__main__"):
                continue
            module = importlib.import_module(info.name)
            found.extend(
                value
                for value in vars(module).values()
                if inspect.isclass(value)
                and issubclass(value, BaseException)
                and value.__module__ == module.__name__
            )
    return found


def problems(classes: Iterable[type[BaseException]]) -> list[str]:
    found: list[str] = []
    owners: dict[str, str] = {}
    for cls in sorted(set(classes), key=lambda c: (c.__module__, c.__qualname__)):
        where = f"{cls.__module__}.{cls.__qualname__}"
        if not issubclass(cls, GaplessError):
            if cls.__name__ in SIGNALS and not hasattr(cls, "code"):
                continue
            found.append(f"{where} does not derive from GaplessError")
            continue
        code = cls.__dict__.get("code")
        if not isinstance(code, str) or not CODE.match(code):
            found.append(f"{where} defines no code of its own (got {code!r})")
            continue
        if code in owners:
            found.append(f"{where} repeats the code {code} of {owners[code]}")
        owners.setdefault(code, where)
        status = cls.http_status
        if status is not None and not 400 <= status <= 599:
            found.append(f"{where} has HTTP status {status}, not an error status")
    return found


def test_every_error_has_a_code_of_its_own() -> None:
    classes = project_exceptions()
    assert len(classes) > 80
    assert problems(classes) == []


def test_a_repeated_code_and_an_error_outside_the_base_are_reported() -> None:
    class First(GaplessError):
        code = "SAME_CODE"

    class Second(GaplessError):
        code = "SAME_CODE"

    class Inherits(First):
        pass

    class Stray(Exception):
        code = "STRAY"

    class BadStatus(GaplessError):
        code = "BAD_STATUS"
        http_status = 200

    reported = problems([First, Second, Inherits, Stray, BadStatus])
    assert [line.split(" ", 1)[1] for line in reported] == [
        "has HTTP status 200, not an error status",
        "defines no code of its own (got None)",
        f"repeats the code SAME_CODE of {__name__}.{First.__qualname__}",
        "does not derive from GaplessError",
    ]


def test_an_error_pickles_with_its_message() -> None:
    import pickle

    from producers.retention.exceptions import LeaseExpired

    restored = pickle.loads(pickle.dumps(LeaseExpired("lease 7 expired")))
    assert (type(restored), restored.code, restored.message) == (
        LeaseExpired,
        "LEASE_EXPIRED",
        "lease 7 expired",
    )
