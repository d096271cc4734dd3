"""Real local services for development and tests, without Docker.

`up` starts PostgreSQL 15, Apache Kafka 4.0 (KRaft, one node), versitygw (S3) and
Apicurio Registry (the Confluent-compatible schema registry)
with their state under `.local/`; `local_environment` gives the GAPLESS_*
variables that point the pipeline at them.
"""

from infra.local.errors import ServiceError
from infra.local.services import down, local_environment, status, up
from infra.local.status import ServiceStatus

__all__ = ["ServiceError", "ServiceStatus", "down", "local_environment", "status", "up"]
