"""Real local services for development and tests, without Docker.

`up` starts PostgreSQL 15, Apache Kafka 4.0 (KRaft, one node), versitygw (S3) and
Apicurio Registry (the Confluent-compatible schema registry)
with their state under `.local/`; `local_environment` gives the GAPLESS_*
variables that point the pipeline at them.

The package itself imports only its error type: every ``gapless`` command imports
the CLI, and a deployed process (a relay, an agents worker) must not pay at each
start for the launchers' imports (SQLAlchemy, FastAPI, boto3). Import what you need
from its module: ``infra.local.services`` (``up``, ``down``, ``status``,
``local_environment``), ``infra.local.status`` (``ServiceStatus``).
"""

from infra.local.errors import ServiceError

__all__ = ["ServiceError"]
