"""Memory bound: a log with several times more distinct keys than the offset map holds is
compacted in several passes while peak RSS grows by no more than the map budget plus a
fixed overhead (measured in a fresh process by bench/compaction.py --memory-only)."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]
OVERHEAD = 8 << 20  # decoded batches, builder buffers, interpreter noise


@pytest.mark.skipif(not Path("/proc/self/clear_refs").exists(), reason="needs Linux /proc")
def test_many_keys_small_map_bounded_rss() -> None:
    proc = subprocess.run(
        [sys.executable, str(REPO / "bench" / "compaction.py"), "--memory-only", "--quick"],
        capture_output=True, text=True, timeout=300, cwd=REPO, check=True,
    )
    figures = json.loads(proc.stdout.strip().splitlines()[-1])
    assert figures["memory_keys"] > 4 * figures["map_capacity_entries"]
    assert figures["passes"] >= 4
    assert figures["distinct_keys_after"] == figures["memory_keys"]
    assert figures["peak_rss_growth_bytes"] < figures["map_budget_bytes"] + OVERHEAD
