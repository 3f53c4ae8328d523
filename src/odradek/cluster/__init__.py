"""Cluster metadata: the store (embedded or, later, ZooKeeper), topics, and the cache."""
