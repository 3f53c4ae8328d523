"""PySpark connector: topics as Spark DataFrames (batch and streaming, read and write).

Install with the ``spark`` extra; ``spark.read.format("odradek")`` then works because the
top-level module :mod:`pyspark_odradek` exposes :class:`OdradekDataSource` as
``DefaultSource``, which Spark 4 registers automatically. See docs/spark.md.
"""

from __future__ import annotations

from odradek.spark.options import OdradekOptionError
from odradek.spark.source import OdradekDataSource

__all__ = ["OdradekDataSource", "OdradekOptionError"]
