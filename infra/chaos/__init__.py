"""Faults injected into a running pipeline: see ``infra.chaos.proxy`` for network faults."""
