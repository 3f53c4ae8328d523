"""The fault run's oracle (:func:`tests.interop._faults.compare_read_back`) on its own, no
broker: whole run Q53 reported as lost a record librdkafka acknowledged without an offset
(its implicit acknowledgement after a leader change) although every replica held it."""

from __future__ import annotations

from ._faults import Report, compare_read_back


def _compare(acked: dict[int, dict[int, bytes]], unplaced: dict[int, list[bytes]],
             final: dict[int, dict[int, bytes]],
             seen: dict[int, dict[int, bytes]] | None = None) -> Report:
    report = Report()
    compare_read_back(report, acked, unplaced, seen or {}, final,
                      {p: max(v, default=-1) + 1 for p, v in final.items()})
    return report


def test_a_record_acknowledged_without_an_offset_and_read_back_is_not_lost() -> None:
    final = {0: {3340: b"v-10020", 3341: b"v-10023", 3342: b"v-10026"}}
    report = _compare({0: {3340: b"v-10020", 3342: b"v-10026"}}, {0: [b"v-10023"]}, final)
    assert report.ok, report.missing


def test_a_record_acknowledged_without_an_offset_and_not_read_back_is_lost() -> None:
    final = {0: {3340: b"v-10020", 3341: b"v-10026"}}
    report = _compare({0: {3340: b"v-10020", 3341: b"v-10026"}}, {0: [b"v-10023"]}, final)
    assert report.lost == 1
    assert "v-10023" in report.missing[0]


def test_two_records_acknowledged_without_an_offset_are_each_looked_for() -> None:
    final = {0: {0: b"v-0", 1: b"v-3"}}
    report = _compare({}, {0: [b"v-0", b"v-3", b"v-6"]}, final)
    assert report.lost == 1
    assert "v-6" in report.missing[0]


def test_one_read_back_on_another_partition_is_lost() -> None:
    report = _compare({}, {0: [b"v-3"]}, {0: {}, 1: {0: b"v-3"}})
    assert report.lost == 1


def test_a_record_acknowledged_at_an_offset_and_not_there_is_lost_or_moved() -> None:
    assert _compare({0: {5: b"v-0"}}, {}, {0: {4: b"v-0"}}).lost == 1
    assert _compare({0: {4: b"v-3"}}, {}, {0: {4: b"v-0"}}).moved == 1


def test_records_read_back_out_of_their_sending_order_are_reported() -> None:
    # v-9 was sent after v-3 but lies before it
    final = {0: {0: b"v-0", 1: b"v-9", 2: b"v-3"}}
    report = _compare({0: {0: b"v-0"}}, {0: [b"v-9", b"v-3"]}, final)
    assert not report.ok
    assert report.moved == 1
    assert any("out of order" in line for line in report.missing)


def test_a_value_read_back_twice_and_a_retracted_record_are_reported() -> None:
    final = {0: {0: b"v-0", 1: b"v-0"}}
    report = _compare({0: {0: b"v-0"}}, {}, final, seen={0: {2: b"v-3"}})
    assert report.duplicated == 1
    assert report.retracted == 1
