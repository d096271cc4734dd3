"""Evidence retention: which captured artifacts are kept, and the sweep that removes
the rest with every row derived from them.

What keeps a capture (``db.resolver.evidence``'s ``KEPT_REASONS``, the first that holds):

- **within window**: it arrived less than ``GAPLESS_EVIDENCE_RETENTION_SECONDS`` ago;
- **unfinished work**: a job of it is not ``done`` or ``skipped`` (a ``failed`` job
  waits on an operator) or finished within the window, or a product of it waits on
  a retry or an operator;
- **decision**: a decision cites it as evidence, or a product of it was applied by a
  decision. Every accepted fact names its decision (INV-05) and decisions are never
  deleted, so evidence an accepted fact rests on is kept for good;
- **open review case**: a product of it opened a review case that is still open;
- **regression fixture**: a pin in ``evidence_fixture`` (``gapless evidence pin``).

A capture nothing keeps expires: its claims, products (the extraction results of
every parser version), checkpoints (the runs over each extraction), identity pins,
repair records, receipts and jobs go with it in one transaction that records the
deletion (``evidence_deletion``). The worker stores no unmapped fields per capture:
what an adapter does not read is excluded, with its reason, in the adapter's source
field inventory, which is code. An artifact is an object named by its content's
hash, so tenants posting the same bytes share it: the object goes only when no
capture of any tenant names it. An object no capture names (an intake that stopped
between its put and its commit) goes once it is older than the window. An artifact
a kept capture names that the bucket does not hold is flagged
(``evidence_missing``) and its capture is never deleted for it.
"""
