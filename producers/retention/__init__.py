"""Retention control on the resolver: registered consumers and their progress,
rebuild leases, the pruner and the retained events they protect (DESIGN §6)."""
