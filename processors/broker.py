"""The agents' Kafka security for Faust (aiokafka), from the same ``GAPLESS_KAFKA_*``
settings that librdkafka's clients take unchanged."""

from __future__ import annotations

import ssl

import faust
from faust.types.auth import CredentialsT

from schemas.settings import KafkaSettings


def ssl_context(settings: KafkaSettings) -> ssl.SSLContext:
    """The TLS context librdkafka would build from the ``ssl.*`` settings."""
    context = ssl.create_default_context(cafile=settings.kafka_ssl_ca_location)
    if settings.kafka_ssl_certificate_location is not None:
        password = settings.kafka_ssl_key_password
        context.load_cert_chain(
            settings.kafka_ssl_certificate_location,
            settings.kafka_ssl_key_location,
            password.get_secret_value() if password is not None else None,
        )
    if settings.kafka_ssl_endpoint_identification_algorithm == "none":
        context.check_hostname = False
    return context


def broker_credentials(settings: KafkaSettings) -> CredentialsT | None:
    """Faust's ``broker_credentials``: none for PLAINTEXT, TLS for SSL, SASL (over TLS
    for SASL_SSL) otherwise."""
    protocol = settings.kafka_security_protocol or "PLAINTEXT"
    context = ssl_context(settings) if protocol.endswith("SSL") else None
    if protocol.startswith("SASL_"):
        password = settings.kafka_sasl_password
        return faust.SASLCredentials(
            username=settings.kafka_sasl_username,
            password=password.get_secret_value() if password is not None else None,
            mechanism=settings.kafka_sasl_mechanism or "PLAIN",
            ssl_context=context,
        )
    if context is not None:
        return faust.SSLCredentials(context)
    return None
