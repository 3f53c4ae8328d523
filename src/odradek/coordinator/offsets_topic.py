"""``__consumer_offsets`` as the group coordinator sees it: create, lead, append, replay.

The transaction coordinator uses the same class for ``__transaction_state`` (``name``
and its ``topic_configs``, e.g. ``min.insync.replicas``).

The coordinator of a group is the leader of the group's partition of this topic. This
class is the only window the group metadata manager (``group_metadata_manager.py``) has on
storage and cluster metadata, so the cluster work can change *who leads* without touching
the coordinator: :meth:`led_partitions` says which partitions this broker leads now, from the
partition states of the metadata (on one broker, all of them).

- **Creation** happens on the first FindCoordinator (or any group request) as in Kafka:
  ``offsets.topic.num.partitions`` partitions, ``offsets.topic.replication.factor``
  replicas, ``cleanup.policy=compact``, ``segment.bytes=offsets.topic.segment.bytes`` and
  ``compression.type=producer``.
- **Append** writes one RecordBatch v2 of (key, value) records through the leader append
  path, the same as Produce: when :meth:`append` returns, the bytes are in the log (the
  page cache; fsync follows the topic's flush settings, as for any produce), so commits are
  acknowledged only after they are durable under the rules produce follows.
- **Replay** reads a partition from its log start to its end, batch by batch, and yields
  each record's key and value (None for a tombstone).
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Iterator, Mapping, Sequence
from typing import NamedTuple

from odradek.cluster.metadata import ClusterMetadata, MetadataError
from odradek.records.batch import iter_batches, iter_records
from odradek.records.builder import BatchBuilder, build_one_record_batch
from odradek.storage.errors import ApiError
from odradek.storage.log import LogAppendInfo, PartitionLog
from odradek.text import plural

__all__ = [
    "OFFSETS_TOPIC", "OffsetsTopic", "OffsetsTopicUnavailableError", "ReplayedRecord",
]

log = logging.getLogger(__name__)

OFFSETS_TOPIC = "__consumer_offsets"
# Bytes read per step when replaying a partition (whole batches; the first may be larger).
REPLAY_READ_BYTES = 4 * 1024 * 1024


class ReplayedRecord(NamedTuple):
    key: bytes
    value: bytes | None
    producer_id: int  # of the record's transaction, -1 for a record outside one
    control: bool | None = None  # a marker: True commit, False abort


def _next_sequence(partition_log: PartitionLog, producer_id: int, producer_epoch: int) -> int:
    """The sequence a coordinator's batch of ``producer_id`` continues from in this log.
    Kafka appends such batches with AppendOrigin.COORDINATOR, unchecked; here the log
    checks every producer's sequence, so the batch follows the producer's last one (0 in
    a new epoch)."""
    entry = partition_log.producer_state.producers.get(producer_id)
    if entry is None or entry.producer_epoch != producer_epoch or entry.last_seq < 0:
        return 0
    return (entry.last_seq + 1) & 0x7FFFFFFF


class OffsetsTopicUnavailableError(ApiError):
    """The topic cannot be created or a partition has no log here (COORDINATOR_NOT_AVAILABLE)."""

    kafka_error = "COORDINATOR_NOT_AVAILABLE"


class OffsetsTopic:
    def __init__(
        self,
        metadata: ClusterMetadata,
        broker_id: int,
        get_log: Callable[[str, int], PartitionLog | None],
        append: Callable[[PartitionLog, bytes], LogAppendInfo],
        num_partitions: int = 50,
        replication_factor: int = 1,
        segment_bytes: int = 104857600,
        name: str = OFFSETS_TOPIC,
        topic_configs: Mapping[str, str] | None = None,
        load_buffer_size: int = REPLAY_READ_BYTES,
    ) -> None:
        self.name = name
        # bytes read per step when replaying (transaction.state.log.load.buffer.size)
        self.load_buffer_size = load_buffer_size
        self.topic_configs = dict(topic_configs or {})
        self.metadata = metadata
        self.broker_id = broker_id
        self._get_log = get_log
        self._append = append
        self.configured_partitions = num_partitions
        self.replication_factor = replication_factor
        self.segment_bytes = segment_bytes

    def exists(self) -> bool:
        return self.metadata.get(self.name) is not None

    @property
    def partition_count(self) -> int:
        info = self.metadata.get(self.name)
        return len(info.partitions) if info is not None else self.configured_partitions

    def ensure(self) -> bool:
        """Create the topic if it is missing; True when this call created it."""
        if self.exists():
            return False
        try:
            self.metadata.create_topic(
                self.name, self.configured_partitions, self.replication_factor,
                {"cleanup.policy": "compact", "segment.bytes": str(self.segment_bytes),
                 "compression.type": "producer", **self.topic_configs},
            )
        except MetadataError as exc:
            if exc.kafka_error == "TOPIC_ALREADY_EXISTS":
                return False
            raise OffsetsTopicUnavailableError(f"cannot create {self.name}: {exc}") from exc
        log.debug("created %s with %s", self.name,  # the metadata logs it too
                 plural(self.configured_partitions, "partition"))
        return True

    def leader_of(self, partition: int) -> int | None:
        """The broker leading ``partition`` (the partition state's leader), if any."""
        info = self.metadata.get(self.name)
        if info is None or partition not in info.partitions:
            return None
        leader = self.metadata.partition_state(self.name, partition).leader
        return leader if leader >= 0 else None

    def leader_epoch(self, partition: int) -> int:
        """The leader epoch of ``partition`` (-1 without a leader): the coordinator epoch
        of what a coordinator loads from it."""
        return self.metadata.partition_state(self.name, partition).leader_epoch

    def led_partitions(self) -> list[int]:
        """The partitions this broker leads and has a log of (``get_log`` answers only
        for partitions led here)."""
        info = self.metadata.get(self.name)
        if info is None:
            return []
        return sorted(
            p for p in info.partitions
            if self.leader_of(p) == self.broker_id
            and self._get_log(self.name, p) is not None
        )

    def _log(self, partition: int) -> PartitionLog:
        found = self._get_log(self.name, partition)
        if found is None:
            raise OffsetsTopicUnavailableError(f"no log for {self.name}-{partition}")
        return found

    def append(
        self, partition: int, records: Sequence[tuple[bytes, bytes | None]], timestamp: int,
        producer_id: int = -1, producer_epoch: int = -1,
    ) -> LogAppendInfo:
        """Append the records as one batch (all or nothing); with a producer id, as a
        transactional batch of that producer (TxnOffsetCommit: visible once its
        transaction's commit marker follows)."""
        partition_log = self._log(partition)
        if producer_id < 0 and len(records) == 1:  # a state change: one record
            (key, value), = records
            return self._append(partition_log, build_one_record_batch(key, value, timestamp))
        builder = BatchBuilder()
        if producer_id >= 0:
            builder.producer_id = producer_id
            builder.producer_epoch = producer_epoch
            builder.base_sequence = _next_sequence(partition_log, producer_id, producer_epoch)
            builder.is_transactional = True
        for key, value in records:
            builder.append(key, value, timestamp)
        return self._append(partition_log, builder.build())

    def replay(self, partition: int) -> Iterator[tuple[bytes, bytes | None]]:
        for entry in self.replay_entries(partition):
            if entry.control is None:
                yield entry.key, entry.value

    def replay_entries(self, partition: int) -> Iterator[ReplayedRecord]:
        """Every keyed record with the producer id of its transaction (-1 outside
        one), and each transaction marker (``control``: True commit, False abort)."""
        partition_log = self._log(partition)
        offset = partition_log.log_start_offset
        end = partition_log.log_end_offset
        while offset < end:
            data = partition_log.read(offset, self.load_buffer_size).read()
            if not data:
                break
            progressed = offset
            for header in iter_batches(data):
                batch = memoryview(data)[header.position : header.position + header.size]
                txn_producer = header.producer_id if header.is_transactional else -1
                for record in iter_records(batch):
                    if record.offset < offset or record.key is None:
                        continue
                    if header.is_control:
                        key = bytes(record.key)
                        if len(key) >= 4:
                            commit = int.from_bytes(key[2:4], "big", signed=True) == 1
                            yield ReplayedRecord(b"", None, header.producer_id, commit)
                    else:
                        yield ReplayedRecord(record.key, record.value, txn_producer)
                progressed = header.next_offset
            if progressed <= offset:
                break
            offset = progressed
