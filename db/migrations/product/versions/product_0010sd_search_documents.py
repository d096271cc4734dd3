"""search-document projection; listing mappings by item

Adds ``product_search_document`` (``db.tables.product``): one row per item and
generation with its title, status and attribute text, a generated ``tsvector``
``document`` over them and a GIN index on it. Fills it from the items and attribute
values already projected (every generation), as the projection itself would
(``processors.projections.search_documents``), so the existing generations are
searchable at once. Adds ``product_listing_mapping_item_idx``, the read API's
"listings of an item". A new table and an index; ``db.migrate`` upgrades every head.

Revision ID: product_0010sd
Revises: product_0009cs
Create Date: 2027-01-20 09:00:00.000000

"""

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op
from sqlalchemy.dialects import postgresql

# revision identifiers, used by Alembic.
revision: str = "product_0010sd"
down_revision: str | Sequence[str] | None = "product_0009cs"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None

_DOCUMENT = (
    "setweight(to_tsvector('simple'::regconfig, title), 'A')"
    " || setweight(to_tsvector('simple'::regconfig, attribute_text), 'B')"
)

_FILL = (
    "INSERT INTO product_search_document (generation, tenant_id, catalog_id, item_id,"
    " title, status, attribute_text, item_revision, position)"
    " SELECT i.generation, i.tenant_id, i.catalog_id, i.item_id, i.title, i.status,"
    "  concat_ws(' ',"
    "   (SELECT string_agg(a.value, ' ' ORDER BY a.key) FROM jsonb_each_text(i.attributes) a),"
    "   v.texts),"
    "  i.revision, greatest(i.position, v.position)"
    " FROM product_item i"
    " CROSS JOIN LATERAL (SELECT string_agg(av.value, ' ' ORDER BY av.attribute_key) AS texts,"
    "   max(av.position) AS position FROM product_attribute_value av"
    "   WHERE av.generation = i.generation AND av.tenant_id = i.tenant_id"
    "   AND av.catalog_id = i.catalog_id AND av.item_id = i.item_id) v"
)


def upgrade() -> None:
    """Upgrade schema: the table, its index, and the documents of the items there are."""
    op.create_table(
        "product_search_document",
        sa.Column("generation", sa.Integer(), nullable=False),
        sa.Column("tenant_id", sa.Text(), nullable=False),
        sa.Column("catalog_id", sa.Text(), nullable=False),
        sa.Column("item_id", sa.Text(), nullable=False),
        sa.Column("title", sa.Text(), nullable=False),
        sa.Column("status", sa.Text(), nullable=False),
        sa.Column("attribute_text", sa.Text(), nullable=False),
        sa.Column(
            "document",
            postgresql.TSVECTOR(),
            sa.Computed(_DOCUMENT, persisted=True),
            nullable=False,
        ),
        sa.Column("item_revision", sa.BigInteger(), nullable=False),
        sa.Column("position", sa.BigInteger(), nullable=False),
        sa.Column(
            "updated_at",
            sa.DateTime(timezone=True),
            server_default=sa.text("now()"),
            nullable=False,
        ),
        sa.PrimaryKeyConstraint("generation", "tenant_id", "catalog_id", "item_id"),
    )
    op.create_index(
        "product_search_document_document_idx",
        "product_search_document",
        ["document"],
        postgresql_using="gin",
    )
    op.execute(_FILL)
    op.create_index(
        "product_listing_mapping_item_idx",
        "product_listing_mapping",
        ["generation", "tenant_id", "catalog_id", "item_id"],
    )


def downgrade() -> None:
    """Downgrade schema."""
    op.drop_index("product_listing_mapping_item_idx", table_name="product_listing_mapping")
    op.drop_index("product_search_document_document_idx", table_name="product_search_document")
    op.drop_table("product_search_document")
