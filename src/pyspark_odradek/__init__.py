"""Spark 4 discovers Python data sources in top-level modules named ``pyspark_*`` that
define ``DefaultSource``; this one registers ``format("odradek")``."""

from __future__ import annotations

from odradek.spark import OdradekDataSource as DefaultSource

__all__ = ["DefaultSource"]
