"""Child process for test_crash_recovery: appends batches forever through LogManager and
prints ``<first> <last> <sha>`` after each append returns (flushed). The parent kills it
with SIGKILL at a random moment."""

from __future__ import annotations

import hashlib
import random
import sys
import time

from odradek.records.builder import BatchBuilder
from odradek.records.compression import CompressionType
from odradek.storage.config import LogConfig
from odradek.storage.manager import LogManager, TopicPartition

CONFIG = {"segment.bytes": 2048, "index.interval.bytes": 128, "segment.index.bytes": 64}


def main() -> None:
    log_dir, seed = sys.argv[1], int(sys.argv[2])
    rng = random.Random(seed)
    cfg = LogConfig.build({}, CONFIG)
    manager = LogManager([log_dir])
    manager.startup(lambda _topic: cfg)
    plog = manager.get_or_create_log(TopicPartition("crash", 0), cfg)
    out = sys.stdout
    out.write("ready\n")
    out.flush()
    n = 0
    while True:
        builder = BatchBuilder(compression=rng.choice(list(CompressionType)))
        now = int(time.time() * 1000)
        for i in range(rng.randint(1, 6)):
            builder.append(b"k%d" % i, rng.randbytes(rng.randint(0, 300)), now + i)
        batch = builder.build()
        info = plog.append_as_leader(batch)
        digest = hashlib.sha256(batch[16:]).hexdigest()
        out.write(f"{info.first_offset} {info.last_offset} {digest}\n")
        out.flush()
        n += 1
        if n % 25 == 0:
            manager.checkpoint()


if __name__ == "__main__":
    main()
