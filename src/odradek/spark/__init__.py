"""PySpark connector: topics as Spark DataFrames (batch and streaming, read and write).

Install with the ``spark`` extra; ``spark.read.format("odradek")`` then works because the
top-level module :mod:`pyspark_odradek` exposes :class:`OdradekDataSource` as
``DefaultSource``, which Spark 4 registers automatically. See docs/spark.md.

Spark looks the data source up, and runs it, in Python workers started with
``PYSPARK_PYTHON`` (default: ``python3`` on the PATH, which may well not have Odradek).
Importing this package before the SparkSession starts sets ``PYSPARK_PYTHON`` to the
importing interpreter when it is unset, so the workers find ``format("odradek")`` as the
driver does; a value already set is left alone.
"""

from __future__ import annotations

import importlib
import os
import sys
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from odradek.spark.options import OdradekOptionError
    from odradek.spark.source import OdradekDataSource

__all__ = ["OdradekDataSource", "OdradekOptionError"]

# The names load on first use, not with the package: ``python -m odradek.spark.daemon``
# (the worker daemon, which any Python task of a session may run under) imports this
# package first, and must start without the connector's dependencies (pyarrow,
# confluent-kafka), as pyspark's own daemon does.
_LAZY = {"OdradekDataSource": "odradek.spark.source",
         "OdradekOptionError": "odradek.spark.options"}

os.environ.setdefault("PYSPARK_PYTHON", sys.executable)


def __getattr__(name: str) -> Any:
    module = _LAZY.get(name)
    if module is None:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    return getattr(importlib.import_module(module), name)
