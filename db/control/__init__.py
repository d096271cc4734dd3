"""The SQL of the control database, one module per owner of its tables."""
