"""``odradek serve`` under cProfile, switched on by SIGUSR1 and dumped by SIGUSR2.

How it works: bench/hot_path_calls.py starts the broker as
``python profiled_broker.py <python> -c <code> serve ...`` (the command line
bench/metrics_cost.py builds, behind this script as its wrapper): the three words after
the script are dropped, the rest are ``odradek``'s arguments. The profiler runs on the
event loop's thread only, from SIGUSR1 to SIGUSR2, which writes the statistics to
``$PROFILE_OUT`` and then creates ``$PROFILE_OUT.done``.
"""

from __future__ import annotations

import cProfile
import os
import signal
import sys
from pathlib import Path
from types import FrameType

OUT = os.environ["PROFILE_OUT"]
_profile = cProfile.Profile()


def _on(_signum: int, _frame: FrameType | None) -> None:
    _profile.enable()


def _off(_signum: int, _frame: FrameType | None) -> None:
    _profile.disable()
    _profile.dump_stats(OUT)
    Path(OUT + ".done").touch()


signal.signal(signal.SIGUSR1, _on)
signal.signal(signal.SIGUSR2, _off)
sys.argv = ["odradek", *sys.argv[4:]]
from odradek.cli.main import main  # noqa: E402  (after the handlers are in place)

main()
