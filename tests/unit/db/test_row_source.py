"""Rows handed over column by column (``db.row_source``): scalars for a few, arrays
for more, the same columns either way (pure: the text and parameters sent)."""

from __future__ import annotations

from db.row_source import FEW_ROWS, Column, rows_from

COLUMNS = (Column("ids", "item_id", "text"), Column("traces", "trace", "text", binary=False))


def test_a_few_rows_go_as_values_each_cell_a_parameter_cast_to_its_type() -> None:
    source, params = rows_from(
        COLUMNS, {"t": "tenant", "ids": ["a", "b"], "traces": [None, "tp"]}, "r", ordinality=True
    )
    assert source == (
        "(VALUES (%(ids_0)b::text, %(traces_0)s::text, 1::bigint),"
        " (%(ids_1)b::text, %(traces_1)s::text, 2::bigint)) AS r(item_id, trace, ord)"
    )
    assert params == {"t": "tenant", "ids_0": "a", "traces_0": None, "ids_1": "b", "traces_1": "tp"}


def test_more_rows_go_as_one_array_a_column() -> None:
    rows = {"ids": [f"i{n}" for n in range(FEW_ROWS + 1)], "traces": [None] * (FEW_ROWS + 1)}
    source, params = rows_from(COLUMNS, rows, "r", ordinality=True)
    assert source == (
        "unnest(%(ids)b::text[], %(traces)s::text[]) WITH ORDINALITY AS r(item_id, trace, ord)"
    )
    assert params == rows
    source, _ = rows_from(COLUMNS, rows, "x")
    assert source == "unnest(%(ids)b::text[], %(traces)s::text[]) AS x(item_id, trace)"
