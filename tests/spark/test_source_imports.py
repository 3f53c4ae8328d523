"""What the connector's planning side imports (:func:`odradek.spark.source.read_offset_range`):
Spark runs a data source's lookup, creation and read planning, and a stream's offsets, in
Python processes of their own, one per planned query, so what ``odradek.spark.source``
imports at the top is paid by each of them. The fetcher, Odradek's own client and the
protocol's schemas are for the tasks that read; the worker daemon preloads them."""

from __future__ import annotations

import json
import subprocess
import sys

from odradek.spark.daemon import PRELOADED

_PROBE = (
    "import json, sys\n"
    "import odradek.spark.source\n"
    "print(json.dumps(sorted(m for m in sys.modules if m.split('.')[0] in "
    "('kio', 'crc32c') or m in ('odradek.spark.fetcher', 'odradek.client.connection', "
    "'odradek.records.batch'))))\n"
)


def test_planning_imports_neither_the_fetcher_nor_the_protocol() -> None:
    out = subprocess.run([sys.executable, "-c", _PROBE], capture_output=True, text=True,
                         check=True).stdout
    assert json.loads(out) == []


def test_the_worker_daemon_preloads_the_fetcher_for_the_tasks() -> None:
    assert "odradek.spark.fetcher" in PRELOADED


def test_a_task_reads_through_the_fetcher_it_imports() -> None:
    code = (
        "import sys\n"
        "from odradek.spark.options import parse_read_options\n"
        "from odradek.spark.source import OffsetRange, read_offset_range\n"
        "opts = parse_read_options({'kafka.bootstrap.servers': '127.0.0.1:9', "
        "'subscribe': 't'}, streaming=False)\n"
        "read_offset_range(opts, OffsetRange('t', -1, 0, 0))\n"
        "print('odradek.spark.fetcher' in sys.modules)\n"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True)
    assert out.stdout.strip() == "True", out.stderr
