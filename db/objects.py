"""The S3 client every object-store user builds from ``ObjectStoreSettings``: path-style
addressing, explicit timeouts, and the SDK's own retries off (each caller bounds its
attempts itself)."""

from __future__ import annotations

from typing import TYPE_CHECKING

import boto3
from botocore.config import Config

from schemas.settings import ObjectStoreSettings

if TYPE_CHECKING:
    from mypy_boto3_s3 import S3Client


def s3_client(settings: ObjectStoreSettings) -> S3Client:
    return boto3.client(
        "s3",
        endpoint_url=settings.s3_endpoint,
        aws_access_key_id=(
            settings.s3_access_key.get_secret_value() if settings.s3_access_key else None
        ),
        aws_secret_access_key=(
            settings.s3_secret_key.get_secret_value() if settings.s3_secret_key else None
        ),
        region_name=settings.s3_region,
        config=Config(
            s3={"addressing_style": "path"},
            retries={"max_attempts": 0, "mode": "standard"},  # our loop retries
            connect_timeout=settings.s3_connect_timeout_seconds,
            read_timeout=settings.s3_read_timeout_seconds,
            max_pool_connections=settings.s3_max_concurrency,
        ),
    )
