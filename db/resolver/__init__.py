"""The SQL of the resolver database, one module per owner of its tables."""
