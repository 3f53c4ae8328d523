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

import os
import sys

from odradek.spark.options import OdradekOptionError
from odradek.spark.source import OdradekDataSource

__all__ = ["OdradekDataSource", "OdradekOptionError"]

os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
