"""Review cases (INV-04): opening one; decisions on it go through ``record_decision``."""

from __future__ import annotations

from dataclasses import dataclass

from db.repositories import review_cases as cases
from db.unit_of_work import UnitOfWork
from producers.resolver.exceptions import CaseAlreadyExists


@dataclass(frozen=True, slots=True)
class CaseRevision:
    """The review-case revision a decision was made against."""

    case_id: str
    expected_revision: int


def open_case(
    uow: UnitOfWork,
    tenant_id: str,
    catalog_id: str,
    case_id: str,
    subject_type: str,
    subject_id: str,
) -> int:
    """Open a case at revision 1 and return it.

    A case is the resolver's own work queue, not exported state: opening one takes
    no cursor lock and produces no event. Decisions on it do both.
    """
    if not cases.insert(uow.tx, tenant_id, catalog_id, case_id, subject_type, subject_id):
        raise CaseAlreadyExists(f"case {case_id!r} already exists in {tenant_id}/{catalog_id}")
    return 1
