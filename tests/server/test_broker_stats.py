"""The request counters' arithmetic: the five parts of a request's time add up to its
total, each in the power-of-two bucket its duration belongs to; folding many noted
requests at once (numpy) counts exactly what counting them one by one would."""

from __future__ import annotations

import random

from odradek.server.broker_stats import (
    BUCKETS,
    FOLD_REQUESTS,
    REQUEST_BOUNDS_MS,
    TIME_NAMES,
    BrokerTopicStats,
    RequestStats,
)


def bucket_of(ns: int) -> int:
    """The first bucket whose bound (in ms) is above ``ns``, or the overflow."""
    return next((i for i, bound in enumerate(REQUEST_BOUNDS_MS) if ns / 1e6 < bound), BUCKETS)


def test_parts_land_in_their_buckets_and_add_up_to_the_total() -> None:
    stats = RequestStats()
    # 30 us waiting for earlier requests, 200 us of local work, 4 s in a purgatory, 3 ms
    # behind earlier responses, 700 ns to hand it to the socket
    stats.note(1, 12, 30_000, 200_000, 4_000_000_000, 3_000_000, 700, 15)
    stats.fold()
    assert stats.requests == {1 << 16 | 12: 1}
    assert stats.errors == {1 << 16 | 15: 1}
    parts = stats.times[1].snapshot()
    assert len(parts) == len(TIME_NAMES)
    expected = {0: 30_000, 1: 200_000, 2: 4_000_000_000, 3: 3_000_000, 4: 700}
    for index, ns in expected.items():
        counts, sum_ns = parts[index]
        assert len(counts) == BUCKETS + 1
        assert sum_ns == ns
        assert counts[bucket_of(ns)] == 1 and sum(counts) == 1
    total_ns = parts[5][1]
    assert total_ns == sum(expected.values())  # the parts add up, exactly
    assert parts[5][0][bucket_of(total_ns)] == 1


def test_a_part_of_no_time_lands_in_the_first_bucket() -> None:
    """A request that never waited has no remote time (the network layer notes 0), nor
    send time when its answer was only buffered."""
    stats = RequestStats()
    stats.note(0, 9, 1_000, 99_000, 0, 1_000, 0, 0)
    stats.fold()
    parts = stats.times[0].snapshot()
    assert parts[1][1] == 99_000 and parts[2][1] == 0
    assert parts[2][0][0] == 1 and parts[4][0][0] == 1  # 0 ns: the first bucket
    assert stats.errors == {}


def test_folding_in_bulk_counts_what_one_by_one_would() -> None:
    """Requests of several types and versions, some failed, some parked, durations
    spread over every bucket and the overflow, noted across several automatic folds
    and a last partial one: the counts, errors, buckets and sums equal a model that
    counts each request on its own."""
    rng = random.Random(17)
    stats = RequestStats()
    model_requests: dict[int, int] = {}
    model_errors: dict[int, int] = {}
    model_counts: dict[tuple[int, int], list[int]] = {}
    model_sums: dict[tuple[int, int], int] = {}
    for _ in range(FOLD_REQUESTS * 3 + 123):
        api_key, version = rng.choice([(0, 9), (0, 7), (1, 12), (3, 12), (11, 9)])
        durations = [rng.choice([0, rng.randrange(1 << 16), rng.randrange(1 << 20),
                                 rng.randrange(1 << 36)]) for _ in range(5)]
        queue, local, remote, response_queue, send = durations
        durations.append(sum(durations))  # TotalTimeMs
        error = rng.choice([0, 0, 0, 6, 15, 27])
        stats.note(api_key, version, queue, local, remote, response_queue, send, error)
        key = api_key << 16 | version
        model_requests[key] = model_requests.get(key, 0) + 1
        if error:
            ekey = api_key << 16 | error
            model_errors[ekey] = model_errors.get(ekey, 0) + 1
        for index, ns in enumerate(durations):
            counts = model_counts.setdefault((api_key, index), [0] * (BUCKETS + 1))
            counts[bucket_of(ns)] += 1
            model_sums[api_key, index] = model_sums.get((api_key, index), 0) + ns
    stats.fold()
    assert stats.requests == model_requests
    assert stats.errors == model_errors
    for (api_key, index), counts in model_counts.items():
        got_counts, got_sum = stats.times[api_key].snapshot()[index]
        assert got_counts == counts, (api_key, TIME_NAMES[index])
        assert got_sum == model_sums[api_key, index]


def test_totals_sum_the_topics_and_keep_a_deleted_topics_counts() -> None:
    stats = BrokerTopicStats()
    a, b = stats.topic("a"), stats.topic("b")
    a.bytes_in, a.messages_in, a.produce_requests, a.appended = 100, 4, 3, 2
    b.bytes_in, b.bytes_out, b.fetch_requests, b.failed_fetch_requests = 50, 70, 5, 1
    assert a.failed_produce_requests == 1
    stats.forget("a")
    assert stats.topics.keys() == {"b"}
    totals = stats.totals()
    assert (totals.bytes_in, totals.messages_in, totals.bytes_out) == (150, 4, 70)
    assert (totals.produce_requests, totals.failed_produce_requests) == (3, 1)
    assert (totals.fetch_requests, totals.failed_fetch_requests) == (5, 1)


def test_a_topic_the_broker_does_not_know_counts_in_the_totals_only() -> None:
    known = {"a"}
    stats = BrokerTopicStats(lambda name: name in known)
    stats.topic("a").bytes_in = 10
    stats.topic("made-up").fetch_requests += 1  # a client's stale or made-up name
    known.discard("a")
    stats.forget("a")
    stats.topic("a").failed_fetch_requests += 1  # a late Fetch for the deleted topic
    assert stats.topics == {}
    totals = stats.totals()
    assert (totals.bytes_in, totals.fetch_requests, totals.failed_fetch_requests) == (10, 1, 1)
