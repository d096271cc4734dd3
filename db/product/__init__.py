"""The SQL of the product database, one module per owner of its tables."""
