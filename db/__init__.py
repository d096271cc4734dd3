"""The storage layer: the SQL of gapless's three databases, and nothing above it.

Where things are:

* ``settings``, ``exceptions``, ``migrate``: shared by the three databases;
* ``tables/`` and ``migrations/``: the schema of each database, as SQLAlchemy tables
  (the one description of a table) and its Alembic history;
* ``unit_of_work`` and ``stream_writer``: the resolver's write path, the per-stream
  cursor lock and its outbox rows; ``repositories/``: the resolver's domain tables,
  each written only inside a Unit of Work;
* ``resolver/``, ``product/``, ``control/``: the rest of each database's SQL, one
  module per owner of its tables;
* ``leadership``: one holder among several processes (a session advisory lock);
  ``batched_delete``: the bounded deletes every retention sweep is made of;
  ``objects``: the S3 client.

The handle rule: the SQL of the resolver's domain (``repositories/`` and
``resolver/evidence``) takes a ``Transaction`` (``db.unit_of_work``). Inside the Unit
of Work it is the Unit of Work's, which has no ``commit``: the Unit of Work alone
decides when statements become durable. Outside it (a read, a sweep) the caller
wraps a connection of its own (``Transaction(conn)``) and owns its commit. All other
SQL takes a ``psycopg.Connection`` and its docstring says whether it runs in the
caller's transaction or on an autocommit connection.
"""
