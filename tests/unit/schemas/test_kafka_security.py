"""The Kafka security settings: passed through under librdkafka's names, refused at
start-up (naming the variables, never echoing a password) when inconsistent."""

from __future__ import annotations

import pytest

from infra.config import ConfigurationError, load
from schemas.settings import KafkaSettings, client_config

SASL = {
    "GAPLESS_KAFKA_SECURITY_PROTOCOL": "SASL_SSL",
    "GAPLESS_KAFKA_SASL_MECHANISM": "SCRAM-SHA-512",
    "GAPLESS_KAFKA_SASL_USERNAME": "analyst",
    "GAPLESS_KAFKA_SASL_PASSWORD": "s3cret",
    "GAPLESS_KAFKA_SSL_CA_LOCATION": "/etc/ssl/kafka-ca.pem",
}


def test_unset_means_plaintext_with_nothing_added() -> None:
    settings = KafkaSettings()
    assert settings.kafka_security() == {}
    assert settings.client_config({"linger.ms": 5}) == {
        "bootstrap.servers": settings.kafka_bootstrap,
        "linger.ms": 5,
    }
    assert client_config("h:1", {"acks": "all"}) == {"bootstrap.servers": "h:1", "acks": "all"}


def test_every_setting_is_passed_through_under_librdkafkas_name(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    for name, value in SASL.items():
        monkeypatch.setenv(name, value)
    monkeypatch.setenv("GAPLESS_KAFKA_SSL_ENDPOINT_IDENTIFICATION_ALGORITHM", "none")
    settings = load(KafkaSettings)
    assert settings.client_config() == {
        "bootstrap.servers": settings.kafka_bootstrap,
        "security.protocol": "SASL_SSL",
        "sasl.mechanism": "SCRAM-SHA-512",
        "sasl.username": "analyst",
        "sasl.password": "s3cret",
        "ssl.ca.location": "/etc/ssl/kafka-ca.pem",
        "ssl.endpoint.identification.algorithm": "none",
    }
    assert "s3cret" not in repr(settings)


@pytest.mark.parametrize(
    ("env", "named"),
    [
        ({"GAPLESS_KAFKA_SECURITY_PROTOCOL": "SASL_TLS"}, "GAPLESS_KAFKA_SECURITY_PROTOCOL"),
        (
            {**SASL, "GAPLESS_KAFKA_SASL_MECHANISM": "GUESS"},
            "GAPLESS_KAFKA_SASL_MECHANISM",
        ),
        (
            {"GAPLESS_KAFKA_SECURITY_PROTOCOL": "SASL_PLAINTEXT"},
            "GAPLESS_KAFKA_SASL_USERNAME",
        ),
        ({"GAPLESS_KAFKA_SASL_MECHANISM": "PLAIN"}, "GAPLESS_KAFKA_SASL_MECHANISM"),
        (
            {"GAPLESS_KAFKA_SASL_USERNAME": "a", "GAPLESS_KAFKA_SASL_PASSWORD": "s3cret"},
            "GAPLESS_KAFKA_SASL_PASSWORD",
        ),
        (
            {
                "GAPLESS_KAFKA_SECURITY_PROTOCOL": "SASL_PLAINTEXT",
                "GAPLESS_KAFKA_SASL_USERNAME": "a",
                "GAPLESS_KAFKA_SASL_PASSWORD": "s3cret",
                "GAPLESS_KAFKA_SSL_CA_LOCATION": "/ca.pem",
            },
            "GAPLESS_KAFKA_SSL_CA_LOCATION",
        ),
    ],
)
def test_bad_values_fail_at_start_up_naming_the_variable(
    monkeypatch: pytest.MonkeyPatch, env: dict[str, str], named: str
) -> None:
    for name, value in env.items():
        monkeypatch.setenv(name, value)
    with pytest.raises(ConfigurationError) as failed:
        load(KafkaSettings)
    assert named in str(failed.value)
    assert "s3cret" not in str(failed.value)
