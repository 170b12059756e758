"""The restart policy of the stack's supervisor, and the embedded broker's settings, without processes."""

from __future__ import annotations

from pathlib import Path

from mnemoflow.supervision import RestartBackoff
from streams.broker_kafka import EmbeddedKafka, server_properties


def test_first_death_restarts_at_once_then_waits_double() -> None:
    b = RestartBackoff(base_delay=1.0, max_delay=8.0, stable_after=60.0)
    b.started("worker", 0.0)
    assert b.due("worker", 5.0)  # first death: restart now
    b.restarted("worker", 5.0)
    assert not b.due("worker", 6.0)  # died again within a minute: wait 1 s
    assert not b.due("worker", 6.9)
    assert b.due("worker", 7.0)
    b.restarted("worker", 7.0)
    assert not b.due("worker", 7.5)  # then 2 s
    assert b.due("worker", 9.5)
    assert b.failures("worker") == 3


def test_wait_is_capped_and_forgiven_after_a_stable_run() -> None:
    b = RestartBackoff(base_delay=1.0, max_delay=4.0, stable_after=60.0)
    now = 0.0
    b.started("broker", now)
    for _ in range(10):
        while not b.due("broker", now):
            now += 0.5
        b.restarted("broker", now)
    assert not b.due("broker", now + 0.1)
    assert b.due("broker", now + 4.1)  # never more than max_delay after the death was seen
    b.restarted("broker", now + 4.1)
    assert b.due("broker", now + 100.0)  # it ran for over a minute: no wait
    assert b.failures("broker") == 1


def test_parts_are_independent() -> None:
    b = RestartBackoff()
    assert b.due("a", 0.0)
    b.restarted("a", 0.0)
    assert not b.due("a", 0.1)
    assert b.due("b", 0.1)


def test_kafka_properties_bind_loopback_and_fsync_when_asked() -> None:
    props = server_properties(Path("/d"), 9092, 9093, fsync_each_batch=True, auto_create_topics=False)
    lines = dict(line.split("=", 1) for line in props.splitlines())
    assert lines["listeners"] == "PLAINTEXT://127.0.0.1:9092,CONTROLLER://127.0.0.1:9093"
    assert lines["log.flush.interval.messages"] == "1"
    assert lines["log.dirs"] == "/d/data"
    assert lines["auto.create.topics.enable"] == "false"
    relaxed = server_properties(Path("/d"), 1, 2, fsync_each_batch=False, auto_create_topics=True)
    assert "log.flush.interval.messages=9223372036854775807" in relaxed


def test_kafka_keeps_its_ports_across_restarts(tmp_path: Path) -> None:
    first = EmbeddedKafka(tmp_path)
    (tmp_path / "ports.json").write_text(f'{{"port": {first.port}, "controller": {first.controller_port}}}')
    again = EmbeddedKafka(tmp_path)
    assert (again.port, again.controller_port) == (first.port, first.controller_port)
