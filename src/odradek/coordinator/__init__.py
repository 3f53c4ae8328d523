"""Coordinators: the classic consumer group coordinator, producer ids, transactions.

Consumer groups, from the requests down to the bytes in ``__consumer_offsets``:

- ``group_coordinator`` — JoinGroup, SyncGroup, Heartbeat, LeaveGroup, who may commit or
  delete offsets, and the group admin APIs (Kafka's ``GroupCoordinator``).
- ``group_state`` and ``group_metadata`` — the sans-I/O group: the state transition
  table, and one group's members, generation, protocol and offsets in memory.
- ``group_metadata_manager`` — the groups of the partitions this broker leads: loading
  them, writing group and offset records, fetching and expiring offsets (Kafka's
  ``GroupMetadataManager``).
- ``offsets_topic`` — the topic itself (create, lead, append, replay); ``group_records`` —
  its key and value formats; ``group_protocol`` — the consumer protocol's subscription
  and assignment bytes.

Both coordinators of an internal topic: ``internal_topic_coordinator`` — creating the
topic, FindCoordinator, loading the partitions led here and unloading the others, and
which partitions are loading or owned (in the spirit of Kafka's ``CoordinatorRuntime``).

Producers: ``producer_ids`` hands out id blocks for InitProducerId.

Transactions: ``transaction_state`` — the sans-I/O state machine of a transactional id
and the coordinator's rules for each request (Kafka's ``TransactionMetadata``);
``transaction_records`` — the ``__transaction_state`` key and value formats;
``transaction_coordinator`` — the coordinator itself: loading, the writes, the markers,
timeouts and expiration (Kafka's ``TransactionCoordinator``).
"""
