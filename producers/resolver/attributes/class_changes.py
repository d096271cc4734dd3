"""An item's class change that would strand its attribute values (INV-07).

``ItemChange`` runs ``refuse_class_change`` before it writes the item; the deferred
trigger on ``catalog_item`` re-checks at COMMIT for writers that skip it.
"""

from __future__ import annotations

from db.repositories import attributes as rows
from db.repositories import catalog_items as items
from db.unit_of_work import UnitOfWork
from producers.resolver.attributes.rules import applies
from producers.resolver.exceptions import AttributeNotApplicable


def refuse_class_change(
    uow: UnitOfWork, tenant_id: str, catalog_id: str, item_id: str, class_id: str
) -> None:
    """Raise ``AttributeNotApplicable`` if moving the item to ``class_id`` would leave
    one of its current values outside its definition's reach.

    It takes the stream's cursor lock first (a no-op if the transaction holds it),
    which keeps every domain writer of the item, its values and the classes out until
    this transaction commits.
    """
    uow.stream(tenant_id, catalog_id)
    tx = uow.tx
    current = items.get(tx, tenant_id, catalog_id, item_id)
    if current is None or current.class_id == class_id:
        return
    values = rows.values_of_item(tx, tenant_id, catalog_id, item_id)
    if not values:
        return
    lineage = rows.lineage(tx, tenant_id, catalog_id, class_id)
    for value in values:
        definition = rows.get_definition(
            tx, tenant_id, catalog_id, value.attribute_key, value.definition_version
        )
        if definition is None or not applies(lineage, definition.applies_to):
            raise AttributeNotApplicable(
                f"item {item_id!r} of {tenant_id}/{catalog_id} cannot move to class"
                f" {class_id!r}: its attribute {value.attribute_key!r} (version"
                f" {value.definition_version}) does not apply there"
            )
