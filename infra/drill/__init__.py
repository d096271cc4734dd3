"""Drills: the recovery procedures carried out end to end in a sandbox, and timed."""
