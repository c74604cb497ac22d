pytest_plugins = ["tests.kafka_broker"]
