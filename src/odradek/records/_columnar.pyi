# Types of the native column builder (_columnar.c); see odradek.records.columnar.
from collections.abc import Sequence
from typing import Any

from odradek.records.columnar import Columns

class ColumnBuilder:
    def __init__(self, headers: bool = False) -> None: ...
    @property
    def rows(self) -> int: ...
    @property
    def nbytes(self) -> int: ...
    def add(
        self, records: bytes | memoryview, count: int, base_offset: int, base_timestamp: int,
        max_timestamp: int, timestamp_type: int, lo: int, hi: int,
    ) -> int: ...
    def finish(self) -> Columns: ...

# Whether a batch of a Produce request's topic_data (odradek.protocol.produce_reader's
# TopicProduceData) has the transactional bit; see _columnar.c.
def transactional_batch_in(topic_data: Sequence[Any]) -> bool: ...
