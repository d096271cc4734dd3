"""The ``gapless`` command, one module per command group (``main`` assembles them)."""
