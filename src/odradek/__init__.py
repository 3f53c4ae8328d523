"""Odradek: a Kafka-compatible distributed commit log written in Python."""

__version__ = "0.1.0"
