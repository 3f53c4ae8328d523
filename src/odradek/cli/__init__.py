"""The ``odradek`` command line: ``odradek <noun> <verb>``."""
