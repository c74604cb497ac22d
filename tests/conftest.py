"""Test-suite plugins: the Kafka broker fixtures (see tests/kafka_broker.py)."""

pytest_plugins = ["tests.kafka_broker"]
