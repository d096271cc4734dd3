"""The product read API: items with their listing mappings, attribute values and
splits, shipping-policy versions, and a full-text search, each read from the
stream's serving generation only (``snapshot``)."""
