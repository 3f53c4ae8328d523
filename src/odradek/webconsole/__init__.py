"""The web console (``odradek console``): a Starlette app that talks to any Kafka-compatible
cluster over the Kafka protocol (through confluent-kafka) and, optionally, charts the
brokers' Prometheus metrics. Needs the ``console`` extra."""
