"""The message store: what comes back after a close, a torn write or a kill -9, and what space
and memory it keeps."""

from __future__ import annotations

import fcntl
import os
import re
import signal
import subprocess
import sys
import textwrap
import time
import zlib
from pathlib import Path

import pytest

from router.store import Entry, Store, StoreError
from router.store import format as fmt

ROOT = Path(__file__).resolve().parent.parent


def body(i: int, size: int = 100) -> bytes:
    return i.to_bytes(4, "big") * (size // 4)


def fill(
    store: Store, n: int, node: str = "q", size: int = 100, durable: bool = True
) -> list[Entry]:
    return [
        store.append(node, body(i, size), priority=4, expiry=None, durable=durable)
        for i in range(n)
    ]


def segments(path: Path) -> list[Path]:
    return sorted(path.glob("*.log"))


def test_format_round_trip_and_torn_records() -> None:
    record = fmt.encode_enqueue(7, "jobs/é", 9, 1234.5, True, 3, b"amqp")
    decoded = fmt.decode(b"xx" + record, 2)
    assert decoded == (
        fmt.Enqueue(7, "jobs/é", 9, 1234.5, True, 3, 2 + len(record) - 4, 4),
        2 + len(record),
    )
    assert fmt.decode(fmt.encode_settle(7), 0) == (fmt.Settle(7), 17)
    assert fmt.decode(fmt.encode_count(7, 2), 0) == (fmt.Count(7, 2), 21)
    no_expiry = fmt.encode_enqueue(1, "q", 0, None, False, 0, b"")
    assert fmt.decode(no_expiry, 0) == (fmt.Enqueue(1, "q", 0, None, False, 0, 34, 0), 34)
    assert fmt.decode(record[:-1], 0) is None
    flipped = bytearray(record)
    flipped[-1] ^= 1
    assert fmt.decode(bytes(flipped), 0) is None
    newer = fmt.RECORD.pack(0, zlib.crc32(b"\x09"), 9)
    with pytest.raises(fmt.FormatError):
        fmt.decode(newer, 0)


def test_round_trip_and_recovery_after_close(tmp_path: Path) -> None:
    store = Store.open(tmp_path)
    a = store.append("a", b"one", priority=1, expiry=2e9, durable=True)
    b = store.append("b", b"two", priority=9, expiry=None, durable=False, delivery_count=2)
    c = store.append("a", b"three", priority=4, expiry=None, durable=True)
    assert [store.body(e) for e in (a, b, c)] == [b"one", b"two", b"three"]
    assert a.id < b.id < c.id
    store.close()

    store = Store.open(tmp_path)
    got = store.recovered()
    assert [(e.id, e.priority, e.expiry, e.durable, e.size) for e in got["a"]] == [
        (a.id, 1, 2e9, True, 3),
        (c.id, 4, None, True, 5),
    ]
    assert [(e.id, e.durable, e.delivery_count) for e in got["b"]] == [(b.id, False, 2)]
    assert [store.body(e) for e in got["a"] + got["b"]] == [b"one", b"three", b"two"]
    assert store.stats()["cached_bytes"] == 0
    store.close()


def test_settle_and_count_are_replayed_and_ids_continue(tmp_path: Path) -> None:
    store = Store.open(tmp_path)
    entries = fill(store, 5)
    store.settle(entries[1])
    store.settle(entries[1])  # twice: harmless
    store.count(entries[2], 3)
    volatile = store.append("q", b"v", priority=0, expiry=None, durable=False)
    store.count(volatile, 1)  # not written: only durable counts are kept
    assert volatile.delivery_count == 1
    assert store.sync() is True
    assert store.sync() is False
    store.close()

    store = Store.open(tmp_path)
    got = store.recovered()["q"]
    assert [e.id for e in got] == [entries[i].id for i in (0, 2, 3, 4)] + [volatile.id]
    assert [e.delivery_count for e in got] == [0, 3, 0, 0, 0]
    fresh = store.append("q", b"new", priority=4, expiry=None, durable=True)
    assert fresh.id == volatile.id + 1
    store.close()


@pytest.mark.parametrize("damage", ["truncate", "flip"])
def test_torn_tail_is_cut_and_everything_before_it_kept(tmp_path: Path, damage: str) -> None:
    store = Store.open(tmp_path)
    entries = fill(store, 20)
    store.close()
    [segment] = segments(tmp_path)
    data = bytearray(segment.read_bytes())
    last_at = entries[-1]._loc & ((1 << 40) - 1)  # the last body's offset
    if damage == "truncate":
        del data[last_at + 10 :]
    else:
        data[last_at + 10] ^= 0xFF
    segment.write_bytes(bytes(data))

    store = Store.open(tmp_path)
    got = store.recovered()["q"]
    assert [e.id for e in got] == [e.id for e in entries[:-1]]
    assert [store.body(e) for e in got] == [body(i) for i in range(19)]
    fresh = store.append("q", b"after", priority=4, expiry=None, durable=True)
    store.close()
    cut = segment.stat().st_size
    assert cut < len(data) and cut == last_at - len(
        fmt.encode_enqueue(1, "q", 4, None, True, 0, b"")
    )

    store = Store.open(tmp_path)
    assert [e.id for e in store.recovered()["q"]] == [e.id for e in entries[:-1]] + [fresh.id]
    store.close()


def test_a_batch_is_recovered_whole_and_read_back_in_place(tmp_path: Path) -> None:
    store = Store.open(tmp_path, memory_bytes=0)  # bodies are read back from the file
    before = fill(store, 3)
    with store.atomic():
        inside = fill(store, 2, node="other")
        store.settle(before[0])
        store.count(before[1], 4)
        store.settle(inside[1])  # in and out in one batch
        assert store.body(inside[0]) == body(0)  # not in the file yet: kept in memory
    assert store.body(inside[0]) == body(0)
    store.close()

    store = Store.open(tmp_path, memory_bytes=0)
    got = store.recovered()
    assert [(e.id, e.delivery_count) for e in got["q"]] == [(before[1].id, 4), (before[2].id, 0)]
    assert [e.id for e in got["other"]] == [inside[0].id]
    assert store.body(got["other"][0]) == body(0)
    assert store.stats()["live_messages"] == 3
    store.close()


@pytest.mark.parametrize("damage", ["truncate", "flip"])
def test_a_torn_batch_is_none_of_it(tmp_path: Path, damage: str) -> None:
    """A commit cut short by a crash: none of its records happened, even the whole ones."""
    store = Store.open(tmp_path)
    before = fill(store, 3)
    store.sync()
    with store.atomic():
        fill(store, 5, node="other")
        store.settle(before[0])
    store.close()
    [segment] = segments(tmp_path)
    data = bytearray(segment.read_bytes())
    if damage == "truncate":
        del data[-5:]  # the batch's last record, the SETTLE, is the one cut
    else:
        data[-1] ^= 0xFF
    segment.write_bytes(bytes(data))

    store = Store.open(tmp_path)
    got = store.recovered()
    assert "other" not in got
    assert [e.id for e in got["q"]] == [e.id for e in before]
    store.close()


def test_a_batch_inside_another_is_part_of_its_record(tmp_path: Path) -> None:
    """A dead letter's move (out of its queue, into the next) inside a transaction's commit:
    one record, so a crash that cuts it keeps none of either."""
    store = Store.open(tmp_path)
    before = fill(store, 3)
    store.sync()
    with store.atomic():
        fill(store, 5, node="other")
        with store.atomic():
            store.settle(before[0])
            fill(store, 1, node="dead")
    store.close()
    [segment] = segments(tmp_path)
    segment.write_bytes(segment.read_bytes()[:-5])  # the last record of the inner one cut

    store = Store.open(tmp_path)
    got = store.recovered()
    assert "other" not in got and "dead" not in got
    assert [e.id for e in got["q"]] == [e.id for e in before]
    store.close()


def test_a_batch_with_a_broken_record_inside_is_refused(tmp_path: Path) -> None:
    """Its CRC holds but what it holds is not whole records: not a torn write, a bad store."""
    inner = fmt.encode_settle(1)[:-1]
    assert fmt.decode(fmt.encode_batch(inner), 0) == (fmt.Batch(9, 9 + len(inner)), 9 + len(inner))
    store = Store.open(tmp_path)
    fill(store, 1)
    store.close()
    [segment] = segments(tmp_path)
    segment.write_bytes(segment.read_bytes() + fmt.encode_batch(inner))
    with pytest.raises(StoreError, match="BATCH"):
        Store.open(tmp_path)


def test_a_foreign_or_newer_segment_is_refused_not_truncated(tmp_path: Path) -> None:
    (tmp_path / "00000001.log").write_bytes(b"RNSTORE2" + bytes(8))
    with pytest.raises(StoreError, match=re.escape("00000001.log")):
        Store.open(tmp_path)
    assert (tmp_path / "00000001.log").stat().st_size == 16
    with (tmp_path / "lock").open() as lock:  # the failed open let go of its lock
        fcntl.flock(lock, fcntl.LOCK_EX | fcntl.LOCK_NB)


def test_segments_rotate_and_settled_ones_are_deleted(tmp_path: Path) -> None:
    store = Store.open(tmp_path, segment_bytes=4096)
    entries = fill(store, 100)
    store.sync()
    assert len(segments(tmp_path)) > 3
    first = segments(tmp_path)[0]
    for entry in entries[:30]:  # the first segment's and some of the second's
        store.settle(entry)
    store.sync()
    assert not first.exists()
    assert store.stats()["live_messages"] == 70
    store.close()

    store = Store.open(tmp_path, segment_bytes=4096)
    assert [e.id for e in store.recovered()["q"]] == [e.id for e in entries[30:]]
    for entry in store.recovered()["q"]:
        store.settle(entry)
    store.sync()
    assert len(segments(tmp_path)) == 1  # only the one being appended to
    store.close()


def test_settles_of_a_kept_segment_are_kept_with_it(tmp_path: Path) -> None:
    def segment(entry: Entry) -> int:
        return entry._loc >> 40

    store = Store.open(tmp_path, segment_bytes=4096)
    first = fill(store, 30)
    second = fill(store, 5)
    assert {segment(e) for e in first} == {1} and {segment(e) for e in second} == {2}
    for entry in first[:5] + second:
        store.settle(entry)  # into segment 2
    more = fill(store, 30)
    for entry in more:
        if segment(entry) == 2:
            store.settle(entry)
    assert segment(more[-1]) == 3
    store.sync()
    # Nothing live in segment 2, but it holds the settles of five messages of segment 1.
    assert [p.name for p in segments(tmp_path)] == ["00000001.log", "00000002.log", "00000003.log"]
    store.close()
    store = Store.open(tmp_path, segment_bytes=4096)
    live = [e.id for e in first[5:]] + [e.id for e in more if segment(e) == 3]
    assert [e.id for e in store.recovered()["q"]] == live
    store.close()


def test_a_segment_holding_settles_outlives_the_messages_they_settle(tmp_path: Path) -> None:
    store = Store.open(tmp_path, segment_bytes=4096)
    entries = fill(store, 60)
    store.sync()
    keep = entries[0]
    for entry in entries[1:]:
        store.settle(entry)
    # A single live message in the oldest segment: the later segments hold its neighbours'
    # settles, so they may not go before it; compaction moves it on instead.
    store.sync()
    store.close()
    store = Store.open(tmp_path, segment_bytes=4096)
    assert [e.id for e in store.recovered()["q"]] == [keep.id]
    assert store.body(store.recovered()["q"][0]) == body(0)
    assert store.stats()["file_bytes"] < 4096 * 2
    store.close()


def test_compaction_keeps_one_stuck_message_from_keeping_the_log(tmp_path: Path) -> None:
    store = Store.open(tmp_path, segment_bytes=4096)
    stuck = store.append("q", b"stuck", priority=4, expiry=None, durable=True)
    for i in range(2000):
        [entry] = fill(store, 1)
        store.count(stuck, i % 7)
        store.settle(entry)
        if i % 50 == 0:
            store.sync()
    store.sync()
    assert store.stats()["file_bytes"] < 4096 * 6
    store.close()
    store = Store.open(tmp_path, segment_bytes=4096)
    [entry] = store.recovered()["q"]
    assert (entry.id, entry.delivery_count, store.body(entry)) == (stuck.id, 1999 % 7, b"stuck")
    store.close()


def test_memory_budget_leaves_newer_bodies_on_disk(tmp_path: Path) -> None:
    store = Store.open(tmp_path, memory_bytes=1000)
    entries = fill(store, 25)  # 2500 bytes of bodies
    assert store.stats()["cached_bytes"] == 1000
    assert [store.body(e) for e in entries] == [body(i) for i in range(25)]  # read before sync
    for entry in entries[:10]:
        store.settle(entry)
    assert store.stats()["cached_bytes"] == 0
    late = fill(store, 3)
    assert store.stats()["cached_bytes"] == 300
    assert store.body(late[0]) is not None
    store.close()


def test_a_second_open_is_refused_naming_the_store(tmp_path: Path) -> None:
    store = Store.open(tmp_path)
    with pytest.raises(StoreError, match=re.escape(str(tmp_path))) as exc:
        Store.open(tmp_path)
    assert str(os.getpid()) in str(exc.value) and "\n" not in str(exc.value)
    store.close()
    Store.open(tmp_path).close()


def test_nodes_are_kept_and_dropping_one_settles_its_messages(tmp_path: Path) -> None:
    store = Store.open(tmp_path)
    store.put_node("jobs", {"type": "queue"})
    store.put_node("news", {"type": "topic", "subscriptions": ["s1"]})
    fill(store, 3, node="jobs")
    fill(store, 2, node="news")
    store.drop_node("jobs")
    assert store.nodes() == {"news": {"type": "topic", "subscriptions": ["s1"]}}
    store.close()
    store = Store.open(tmp_path)
    assert store.nodes() == {"news": {"type": "topic", "subscriptions": ["s1"]}}
    assert list(store.recovered()) == ["news"]
    assert not (tmp_path / "nodes.json.tmp").exists()
    store.close()


_WRITER = """
import sys
import time
from pathlib import Path
from router.store import Store

store = Store.open(Path(sys.argv[1]), segment_bytes=256 * 1024)
for batch in range(100):
    for i in range(100):
        n = batch * 100 + i
        store.append("q", n.to_bytes(4, "big") * 25, priority=4, expiry=None, durable=True)
    store.sync()
    print(n, flush=True)
    time.sleep(0.002)  # time to be killed before the end
"""


def test_synced_messages_survive_kill_9(tmp_path: Path) -> None:
    env = {
        **os.environ,
        "PYTHONPATH": os.pathsep.join([str(ROOT), os.environ.get("PYTHONPATH", "")]),
    }
    writer = subprocess.Popen(
        [sys.executable, "-c", textwrap.dedent(_WRITER), str(tmp_path)],
        stdout=subprocess.PIPE,
        env=env,
        text=True,
    )
    synced = -1
    try:
        assert writer.stdout is not None
        deadline = time.monotonic() + 30
        while synced < 3000 and time.monotonic() < deadline:
            line = writer.stdout.readline()
            if not line:
                break
            synced = int(line)
        alive = writer.poll() is None
        writer.send_signal(signal.SIGKILL)
    finally:
        writer.kill()
        writer.wait(timeout=10)
    assert synced >= 3000, "the writer reported too few syncs"
    assert alive, "the writer finished before it was killed"

    store = Store.open(tmp_path)
    got = store.recovered()["q"]
    assert len(got) > synced
    for n, entry in enumerate(got):
        assert (entry.id, entry.durable, store.body(entry)) == (
            n + 1,
            True,
            n.to_bytes(4, "big") * 25,
        )
    store.close()


def test_reopening_does_not_pile_up_segments(tmp_path: Path) -> None:
    for _ in range(5):
        Store.open(tmp_path).close()
    assert len(segments(tmp_path)) == 1


def test_an_unreadable_nodes_file_is_a_store_error(tmp_path: Path) -> None:
    (tmp_path / "nodes.json").write_text("{not json")
    with pytest.raises(StoreError, match=re.escape("nodes.json")):
        Store.open(tmp_path)
