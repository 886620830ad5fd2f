"""NOTIFY end to end: streams run through Dagster (the harness), the op hook and the retry
sensor deliver over WebSocket to a real receiver on 127.0.0.1, and the JSON it gets is checked
field by field."""

from __future__ import annotations

import base64
import hashlib
import json
import socket
import subprocess
import sys
import threading
import time
from decimal import Decimal
from pathlib import Path
from typing import Any

import pytest
import websocket
from websockets.sync.server import ServerConnection, serve

from dagster_tdstream import Session, StreamHarness, Warehouse
from dagster_tdstream.notify.delivery import DeliverySettings, deliver
from dagster_tdstream.notify.events import json_value
from dagster_tdstream.notify.messages import pack
from dagster_tdstream.orchestration.notifications import TDStreamNotifier

from .conftest import Receiver, assert_rejected, free_port, output

T = 1700000000000
SCHEMA = "create database d; use d; create stable st (ts timestamp, v int, w int) tags (g int);"


class DroppingReceiver:
    """A receiver that dies mid-batch: it accepts the WebSocket handshake, reads one frame
    and drops the TCP connection without a close handshake (raw sockets: a WebSocket
    library would read the whole batch and answer the close before its handler ran)."""

    def __init__(self, port: int) -> None:
        self.messages: list[dict[str, Any]] = []
        self._listener = socket.create_server(("127.0.0.1", port))
        self._listener.settimeout(0.2)
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._serve, daemon=True)
        self._thread.start()

    def _serve(self) -> None:
        while not self._stop.is_set():
            try:
                conn, _ = self._listener.accept()
            except TimeoutError:
                continue
            with conn:
                conn.settimeout(5)
                request = b""
                while b"\r\n\r\n" not in request:
                    request += conn.recv(4096)
                key = next(
                    line.split(b":", 1)[1].strip()
                    for line in request.split(b"\r\n")
                    if line.lower().startswith(b"sec-websocket-key")
                )
                accept = base64.b64encode(hashlib.sha1(key + b"258EAFA5-E914-47DA-95CA-C5AB0DC85B11").digest())
                conn.sendall(
                    b"HTTP/1.1 101 Switching Protocols\r\nUpgrade: websocket\r\nConnection: Upgrade\r\n"
                    b"Sec-WebSocket-Accept: " + accept + b"\r\n\r\n"
                )
                self.messages.append(json.loads(self._frame(conn)))
                conn.shutdown(socket.SHUT_RDWR)

    @staticmethod
    def _frame(conn: socket.socket) -> bytes:
        def exactly(n: int) -> bytes:
            data = b""
            while len(data) < n:
                data += conn.recv(n - len(data))
            return data

        head = exactly(2)
        length = head[1] & 0x7F
        if length == 126:
            length = int.from_bytes(exactly(2), "big")
        elif length == 127:
            length = int.from_bytes(exactly(8), "big")
        mask = exactly(4)  # client frames are always masked
        return bytes(b ^ mask[i % 4] for i, b in enumerate(exactly(length)))

    def stop(self) -> None:
        self._stop.set()
        self._thread.join(timeout=10)
        self._listener.close()


def _fields(events: list[dict[str, Any]], *names: str) -> list[tuple[Any, ...]]:
    return [tuple(e.get(n) for n in names) for e in events]


def test_interval_open_and_close_events_as_documented(
    session: Session, harness: StreamHarness, receiver: Receiver
) -> None:
    session.execute(
        SCHEMA + "create table a using st tags (1);"
        f"create stream s interval(10s) sliding(10s) from st partition by tbname notify('{receiver.url}') "
        "on (window_open|window_close) into out as select _twstart, count(*) n, sum(v) total from %%trows;"
        f"insert into a values ({T}, 1, 0) ({T + 5000}, 2, 0) ({T + 10000}, 3, 0)"
    )
    assert harness.run_until_idle().failures == []
    receiver.settle()
    (message,) = receiver.messages
    assert (
        set(message) == {"messageId", "timestamp", "streams"} and abs(message["timestamp"] - time.time() * 1000) < 60000
    )
    (entry,) = message["streams"]
    assert entry["streamName"] == "s"
    uid = session.warehouse.catalog.get_table("d", "a").uid
    child = session.query("select table_name from information_schema.ins_tables where stable_name = 'out'").rows[0][0]
    opened, closed, opened2 = entry["events"]  # the row at T+10s closes [T, T+10s), then opens the next
    assert opened == {
        "tableName": child, "eventType": "WINDOW_OPEN", "eventTime": opened["eventTime"],
        "triggerId": f"{uid}:{T}", "triggerType": "Interval", "groupId": str(uid), "windowStart": T,
    }  # fmt: skip
    assert opened2["eventType"] == "WINDOW_OPEN" and opened2["windowStart"] == T + 10000
    assert closed == {
        "tableName": child, "eventType": "WINDOW_CLOSE", "eventTime": closed["eventTime"],
        "triggerId": f"{uid}:{T}", "triggerType": "Interval", "groupId": str(uid), "windowStart": T,
        "windowEnd": T + 10000, "result": {"_twstart": T, "n": 2, "total": 3},
    }  # fmt: skip
    assert abs(closed["eventTime"] - time.time() * 1000) < 60000
    # the open was only notified, not computed (EVENT_TYPE is WINDOW_CLOSE): one output row
    assert output(session, "select _twstart, n, total from out") == [(T, 2, 3)]
    assert session.query("select notify_pending, notify_dropped from information_schema.ins_streams").rows == [(0, 0)]


def test_row_window_events_carry_states_conditions_and_results(
    session: Session, harness: StreamHarness, receiver: Receiver
) -> None:
    note = f"notify('{receiver.url}') on (window_open|window_close)"
    session.execute(
        SCHEMA + "create table a using st tags (1);"
        f"create stream st_s state_window(v) from a {note} into st_out as select _twstart, count(*) n from %%trows;"
        f"create stream ev_s event_window(start with v >= 5 end with w = 1) from a {note} "
        "into ev_out as select _twstart, sum(v) sv from %%trows;"
        f"create stream se_s session(ts, 3s) from a {note} into se_out as select _twstart, count(*) n from %%trows;"
        f"create stream co_s count_window(2) from a {note} into co_out as select _twstart, sum(v) sv from %%trows;"
        f"insert into a values ({T}, 1, 0) ({T + 1000}, 1, 0) ({T + 2000}, 5, 0) ({T + 3000}, 6, 1) ({T + 10000}, 2, 0)"
    )
    assert harness.run_until_idle().failures == []
    state = receiver.events("st_s")
    assert _fields(state, "eventType", "windowStart", "windowEnd", "prevState", "curState", "nextState") == [
        ("WINDOW_OPEN", T, None, None, 1, None),
        ("WINDOW_CLOSE", T, T + 1000, None, 1, 5),
        ("WINDOW_OPEN", T + 2000, None, 1, 5, None),
        ("WINDOW_CLOSE", T + 2000, T + 2000, None, 5, 6),
        ("WINDOW_OPEN", T + 3000, None, 5, 6, None),
        ("WINDOW_CLOSE", T + 3000, T + 3000, None, 6, 2),
        ("WINDOW_OPEN", T + 10000, None, 6, 2, None),
    ]
    assert [e.get("result") for e in state if e["eventType"] == "WINDOW_CLOSE"] == [
        {"_twstart": T, "n": 2},
        {"_twstart": T + 2000, "n": 1},
        {"_twstart": T + 3000, "n": 1},
    ]
    assert {e["triggerType"] for e in state} == {"State"}
    assert state[0]["triggerId"] == state[1]["triggerId"] != state[2]["triggerId"]  # open and close share it
    event = receiver.events("ev_s")
    assert _fields(event, "eventType", "windowStart", "windowEnd", "triggerCondition", "result") == [
        ("WINDOW_OPEN", T + 2000, None, {"conditionIndex": 0, "fieldValue": {"v": 5, "w": 0}}, None),
        ("WINDOW_CLOSE", T + 2000, T + 3000, {"conditionIndex": 0, "fieldValue": {"v": 6, "w": 1}},
         {"_twstart": T + 2000, "sv": 11}),
    ]  # fmt: skip
    session_events = receiver.events("se_s")
    assert _fields(session_events, "triggerType", "eventType", "windowStart", "windowEnd", "result") == [
        ("Session", "WINDOW_OPEN", T, None, None),
        ("Session", "WINDOW_CLOSE", T, T + 3000, {"_twstart": T, "n": 4}),
        ("Session", "WINDOW_OPEN", T + 10000, None, None),
    ]
    count = receiver.events("co_s")
    assert _fields(count, "triggerType", "eventType", "windowStart", "result") == [
        ("Count", "WINDOW_OPEN", T, None),
        ("Count", "WINDOW_CLOSE", T, {"_twstart": T, "sv": 2}),
        ("Count", "WINDOW_OPEN", T + 2000, None),
        ("Count", "WINDOW_CLOSE", T + 2000, {"_twstart": T + 2000, "sv": 11}),
        ("Count", "WINDOW_OPEN", T + 10000, None),
    ]


def test_sliding_and_period_send_on_time_with_results(warehouse: Warehouse, spark: object, receiver: Receiver) -> None:
    session = Session(warehouse, timezone="UTC")
    session.execute(
        SCHEMA + "create table a using st tags (1);"
        f"create stream sl sliding(10s) from a notify('{receiver.url}') into sl_out "
        "as select _tcurrent_ts ts, count(*) n from %%trows;"
        f"create stream pe period(10s) notify('{receiver.url}') into pe_out "
        "as select cast(_tlocaltime / 1000000 as timestamp) ts, count(*) c from st;"
        f"insert into a values ({T + 1000}, 1, 0) ({T + 12000}, 2, 0)"
    )
    base = 1_800_000_000_000_000_000
    clock = {"now": base}
    harness = StreamHarness(warehouse, timezone="UTC", clock=lambda: clock["now"])
    assert harness.run_until_idle().failures == []
    clock["now"] = base + 10 * 10**9
    assert harness.run_until_idle().failures == []
    sliding = receiver.events("sl")
    assert _fields(sliding, "eventType", "triggerType", "windowStart", "result") == [
        ("ON_TIME", "Sliding", None, {"ts": T + 10000, "n": 1})
    ]
    period = receiver.events("pe")
    assert _fields(period, "eventType", "triggerType", "result") == [
        ("ON_TIME", "Period", {"ts": base // 10**6 + 10000, "c": 2})
    ]


def test_where_filters_on_result_columns(session: Session, harness: StreamHarness, receiver: Receiver) -> None:
    session.execute(
        SCHEMA + "create table a using st tags (1);"
        f"create stream s interval(10s) sliding(10s) from a notify('{receiver.url}') on (window_close) "
        "where sum(v) > 2 and n >= 1 into out as select _twstart, count(*) n, sum(v) from %%trows;"
        f"insert into a values ({T}, 1, 0) ({T + 10000}, 5, 0) ({T + 20000}, 1, 0) ({T + 30000}, 9, 0)"
    )
    assert harness.run_until_idle().failures == []
    assert [e["result"] for e in receiver.events()] == [{"_twstart": T + 10000, "n": 1, "sum(v)": 5}]
    assert len(output(session, "select * from out")) == 3  # the table has every window


def test_a_new_headless_run_continues_where_the_last_one_stopped(
    session: Session, warehouse: Warehouse, receiver: Receiver
) -> None:
    session.execute(
        SCHEMA + "create table a using st tags (1);"
        f"create stream s interval(10s) sliding(10s) from a notify('{receiver.url}') on (window_close) "
        "into out as select _twstart, sum(v) s from %%trows;"
        f"insert into a values ({T}, 1, 0) ({T + 10000}, 2, 0) ({T + 20000}, 3, 0)"
    )
    # each `tdstream run --until-idle` is a new process: a new harness without sensor cursors
    assert StreamHarness(warehouse, timezone="UTC").run_until_idle().failures == []
    session.execute(f"insert into a values ({T + 30000}, 4, 0) ({T + 40000}, 5, 0)")
    assert StreamHarness(warehouse, timezone="UTC").run_until_idle().failures == []
    assert [e["result"]["s"] for e in receiver.events("s")] == [1, 2, 3, 4]  # each window once
    assert output(session, "select * from out") == [(T + k * 10000, k + 1) for k in range(4)]


def test_notify_history_on_and_off(session: Session, harness: StreamHarness, receiver: Receiver) -> None:
    session.execute(
        SCHEMA + "create table a using st tags (1);"
        f"insert into a values ({T}, 1, 0) ({T + 10000}, 2, 0) ({T + 20000}, 3, 0);"
        f"create stream quiet interval(10s) sliding(10s) from a stream_options(fill_history) "
        f"notify('{receiver.url}') on (window_close) into q_out as select _twstart, sum(v) s from %%trows;"
        f"create stream loud interval(10s) sliding(10s) from a stream_options(fill_history) "
        f"notify('{receiver.url}') on (window_close) notify_options(notify_history) "
        "into l_out as select _twstart, sum(v) s from %%trows"
    )
    assert harness.run_until_idle().failures == []
    assert output(session, "select * from q_out") == output(session, "select * from l_out") == [(T, 1), (T + 10000, 2)]
    assert receiver.events("quiet") == []
    assert [e["result"]["s"] for e in receiver.events("loud")] == [1, 2]
    session.execute(f"insert into a values ({T + 30000}, 4, 0)")  # real time: both notify
    assert harness.run_until_idle().failures == []
    assert [e["result"]["s"] for e in receiver.events("quiet")] == [3]
    assert [e["result"]["s"] for e in receiver.events("loud")] == [1, 2, 3]


def test_a_late_row_sends_an_invalidation_then_the_new_result(
    session: Session, harness: StreamHarness, receiver: Receiver
) -> None:
    session.execute(
        SCHEMA + "create table a using st tags (1);"
        f"create stream iv interval(10s) sliding(10s) from a notify('{receiver.url}') on (window_close) "
        "into iv_out as select _twstart, sum(v) s from %%trows;"
        f"create stream ss session(ts, 5s) from a notify('{receiver.url}') on (window_close) "
        "into ss_out as select _twstart, count(*) n from %%trows;"
        f"insert into a values ({T}, 1, 0) ({T + 8000}, 2, 0) ({T + 20000}, 3, 0) ({T + 40000}, 4, 0)"
    )
    assert harness.run_until_idle().failures == []
    before = len(receiver.events("iv")), len(receiver.events("ss"))
    session.execute(f"insert into a values ({T + 4000}, 10, 0) ({T + 14000}, 10, 0)")  # late rows
    assert harness.run_until_idle().failures == []
    interval = receiver.events("iv")[before[0] :]
    assert _fields(interval, "eventType", "windowStart", "windowEnd", "result") == [
        ("WINDOW_INVALIDATION", T, T + 10000, None),
        ("WINDOW_CLOSE", T, T + 10000, {"_twstart": T, "s": 13}),
        ("WINDOW_INVALIDATION", T + 10000, T + 20000, None),
        ("WINDOW_CLOSE", T + 10000, T + 20000, {"_twstart": T + 10000, "s": 10}),
    ]
    # T+4s joins the sessions at T and T+8s into one (T+14s stays apart): the session at T+8s
    # is gone and the one at T changed
    sessions = receiver.events("ss")[before[1] :]
    invalidated = {e["windowStart"]: e["windowEnd"] for e in sessions if e["eventType"] == "WINDOW_INVALIDATION"}
    # the vanished session with its bounds; the changed one (same start, same triggerId) too
    assert invalidated[T + 8000] == T + 8000 and T in invalidated
    closed = [
        (e["windowStart"], e["windowEnd"], e["result"]["n"]) for e in sessions if e["eventType"] == "WINDOW_CLOSE"
    ]
    assert (T, T + 8000, 3) in closed and (T + 14000, T + 14000, 1) in closed
    # the vanished session's row stays: a 3.3.7 stream never deletes results it wrote
    assert output(session, "select * from ss_out") == [(T, 3), (T + 8000, 1), (T + 14000, 1), (T + 20000, 1)]


def test_calc_notify_only_and_notify_only_streams_write_no_table(
    session: Session, harness: StreamHarness, receiver: Receiver
) -> None:
    session.execute(
        SCHEMA + "create table a using st tags (1);"
        f"create stream calc state_window(v) from a stream_options(calc_notify_only) notify('{receiver.url}') "
        "on (window_close) into res (firstts, cnt) as select first(_c0), count(*) from %%trows;"
        f"create stream bare count_window(2) from a notify('{receiver.url}') on (window_close);"
        f"insert into a values ({T}, 1, 0) ({T + 1000}, 1, 0) ({T + 2000}, 2, 0)"
    )
    assert harness.run_until_idle().failures == []
    assert [e["result"] for e in receiver.events("calc")] == [{"firstts": T, "cnt": 2}]
    bare = receiver.events("bare")
    assert _fields(bare, "eventType", "windowStart", "windowEnd", "result") == [("WINDOW_CLOSE", T, T + 1000, None)]
    tables = session.query("select table_name from information_schema.ins_tables where db_name = 'd'").rows
    assert sorted(t[0] for t in tables) == ["a"]


def test_on_failure_pause_holds_the_stream_and_loses_nothing(
    session: Session, warehouse: Warehouse, spark: object, receiver: Receiver
) -> None:
    harness = StreamHarness(warehouse, timezone="UTC", notifier=TDStreamNotifier(backoff_seconds=0, timeout_seconds=5))
    session.execute(
        SCHEMA + "create table a using st tags (1);"
        f"create stream s interval(10s) sliding(10s) from a notify('{receiver.url}') on (window_open|window_close) "
        "notify_options(on_failure_pause) into out as select _twstart, sum(v) s from %%trows;"
        f"insert into a values ({T}, 1, 0) ({T + 10000}, 2, 0)"
    )
    assert harness.run_until_idle().failures == []
    assert output(session, "select * from out") == [(T, 1)]
    receiver.stop()
    session.execute(f"insert into a values ({T + 20000}, 3, 0)")
    assert harness.run_until_idle().failures == []  # the run writes; its delivery fails
    status = "select status, last_error, notify_pending from information_schema.ins_streams"
    ((state, reason, waiting),) = session.query(status).rows
    assert state == "Paused" and "notification delivery failed" in reason and waiting == 2
    session.execute(f"insert into a values ({T + 30000}, 4, 0) ({T + 40000}, 5, 0)")
    report = harness.run_until_idle()
    assert report.runs == 0 and "is paused" in report.skipped["d__s__trigger"]
    assert output(session, "select * from out") == [(T, 1), (T + 10000, 2)]  # no progress while paused
    receiver.start()
    assert harness.run_until_idle().failures == []
    assert session.query(status).rows == [("Running", None, 0)]
    assert output(session, "select * from out") == [(T, 1), (T + 10000, 2), (T + 20000, 3), (T + 30000, 4)]
    events = receiver.events()
    keys = [(e["eventType"], e["windowStart"]) for e in events]
    assert keys == [  # in the order the rows fired them: each row closes the window before it, then opens its own
        ("WINDOW_OPEN", T), ("WINDOW_CLOSE", T), ("WINDOW_OPEN", T + 10000),
        ("WINDOW_CLOSE", T + 10000), ("WINDOW_OPEN", T + 20000),
        ("WINDOW_CLOSE", T + 20000), ("WINDOW_OPEN", T + 30000), ("WINDOW_CLOSE", T + 30000), ("WINDOW_OPEN", T + 40000),
    ]  # fmt: skip
    assert len({(e["triggerId"], e["eventType"]) for e in events}) == len(events)  # each once


def test_default_policy_drops_after_bounded_attempts_and_the_stream_goes_on(
    session: Session, warehouse: Warehouse, spark: object
) -> None:
    closed = f"ws://127.0.0.1:{free_port()}/gone"
    harness = StreamHarness(
        warehouse, timezone="UTC", notifier=TDStreamNotifier(backoff_seconds=0, max_attempts=2, timeout_seconds=5)
    )
    session.execute(
        SCHEMA + "create table a using st tags (1);"
        f"create stream s interval(10s) sliding(10s) from a notify('{closed}', 'http://127.0.0.1:9/not-ws') "
        "on (window_close) into out as select _twstart, sum(v) s from %%trows;"
        f"insert into a values ({T}, 1, 0) ({T + 10000}, 2, 0) ({T + 20000}, 3, 0)"
    )
    report = harness.run_until_idle()
    assert report.failures == []
    harness.run_until_idle()
    assert output(session, "select * from out") == [(T, 1), (T + 10000, 2)]
    status = "select status, notify_pending, notify_dropped from information_schema.ins_streams"
    assert session.query(status).rows == [("Running", 0, 4)]  # 2 windows × 2 URLs
    errors = {row[0] for row in session.warehouse.catalog.engine.connect().exec_driver_sql(
        "select last_error from tds_notifications")}  # fmt: skip
    assert any("cannot connect to " + closed in e for e in errors)
    assert any("notifications go over WebSocket only (ws:// or wss://)" in e for e in errors)


def test_a_receiver_that_drops_mid_batch_gets_the_batch_again(warehouse: Warehouse, spark: object) -> None:
    session = Session(warehouse, timezone="UTC")
    harness = StreamHarness(warehouse, timezone="UTC", notifier=TDStreamNotifier(backoff_seconds=0, message_bytes=300))
    port = free_port()
    dropping = DroppingReceiver(port)
    session.execute(
        SCHEMA + "create table a using st tags (1);"
        f"create stream s interval(10s) sliding(10s) from a notify('ws://127.0.0.1:{port}/n') on (window_close) "
        "notify_options(on_failure_pause) into out as select _twstart, sum(v) s from %%trows;"
        f"insert into a values ({T}, 1, 0) ({T + 10000}, 2, 0) ({T + 20000}, 3, 0) ({T + 30000}, 4, 0)"
    )
    harness.run_until_idle(max_rounds=3)
    dropping.stop()
    assert session.query("select status from information_schema.ins_streams").rows == [("Paused",)]
    seen = [e["triggerId"] for m in dropping.messages for s in m["streams"] for e in s["events"]]
    assert seen  # the first message of the batch got through before the drop
    receiver = Receiver(port)
    receiver.start()
    try:
        assert harness.run_until_idle().failures == []
    finally:
        receiver.stop()
    events = receiver.events()
    # the whole batch again, in order: what arrived before the drop carries the same triggerIds
    assert [e["windowStart"] for e in events] == [T, T + 10000, T + 20000]
    assert seen[0] == events[0]["triggerId"]
    assert session.query("select status from information_schema.ins_streams").rows == [("Running",)]


def test_values_json_cannot_carry_are_encoded_and_messages_are_bounded() -> None:
    assert json_value(float("nan")) is None and json_value(float("inf")) is None
    assert json_value(Decimal("12.3400")) == "12.3400"
    assert json_value(b"abc") == "abc" and json_value(b"\xff\x00") == "0xff00"
    events = [("s1", json.dumps({"n": i, "pad": "x" * 40})) for i in range(6)] + [("s2", json.dumps({"n": 6}))]
    messages = pack(events, max_bytes=260)
    assert all(len(m.text.encode()) <= 260 for m in messages) and len(messages) > 1
    assert [i for m in messages for i in m.indices] == list(range(7))
    decoded = [json.loads(m.text) for m in messages]
    assert [e["n"] for d in decoded for s in d["streams"] for e in s["events"]] == list(range(7))
    assert len({d["messageId"] for d in decoded}) == len(decoded)
    assert decoded[-1]["streams"][-1]["streamName"] == "s2"


def test_nan_results_are_delivered_as_null(session: Session, harness: StreamHarness, receiver: Receiver) -> None:
    session.execute(
        SCHEMA + "create table a using st tags (1);"
        f"create stream s interval(10s) sliding(10s) from a notify('{receiver.url}') on (window_close) "
        "into out as select _twstart, sqrt(-1.0 * sum(v)) r, cast(sum(v) as double) d from %%trows;"
        f"insert into a values ({T}, 1, 0) ({T + 10000}, 2, 0)"
    )
    assert harness.run_until_idle().failures == []
    assert [e["result"] for e in receiver.events()] == [{"_twstart": T, "r": None, "d": 1.0}]


def test_wss_verifies_certificates(tmp_path: Path) -> None:
    """A wss:// receiver with a certificate the trust store does not know is refused (and the
    notification stays for a retry); naming its CA lets delivery through."""
    import ssl

    key, cert = tmp_path / "key.pem", tmp_path / "cert.pem"
    subprocess.run(
        ["openssl", "req", "-x509", "-newkey", "rsa:2048", "-nodes", "-keyout", str(key), "-out", str(cert),
         "-days", "1", "-subj", "/CN=127.0.0.1", "-addext", "subjectAltName=IP:127.0.0.1"],
        check=True, capture_output=True,
    )  # fmt: skip
    context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    context.load_cert_chain(cert, key)
    got: list[str] = []

    def handle(connection: ServerConnection) -> None:
        got.extend(connection)

    port = free_port()
    server = serve(handle, "127.0.0.1", port, ssl=context)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        warehouse = Warehouse(str(tmp_path / "wh"))
        warehouse.catalog.record_notifications([])
        Session(warehouse, timezone="UTC").execute(
            "create database d; use d; create table t (ts timestamp, v int);"
            f"create stream s count_window(1) from t notify('wss://127.0.0.1:{port}/n') on (window_close)"
        )
        from dagster_tdstream.storage.catalog import Notification

        warehouse.catalog.record_notifications([Notification("d.s", f"wss://127.0.0.1:{port}/n", "x", "1:1", "{}")])
        refused = deliver(warehouse, DeliverySettings(backoff_ms=0, timeout_seconds=5))
        assert refused.sent == 0 and "CERTIFICATE_VERIFY_FAILED" in refused.errors[0]
        trusted = deliver(warehouse, DeliverySettings(backoff_ms=0, timeout_seconds=5, ca_file=str(cert)))
        deadline = time.monotonic() + 5
        while not got and time.monotonic() < deadline:  # the handler thread may lag the handshake
            time.sleep(0.05)
        assert trusted.sent == 1 and len(got) == 1
    finally:
        server.shutdown()
        thread.join(timeout=10)


def test_tdstream_listen_prints_what_arrives() -> None:
    port = free_port()
    listener = subprocess.Popen(
        [str(Path(sys.executable).parent / "tdstream"), "listen", "--port", str(port), "--count", "1", "--raw"],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    try:
        deadline = time.monotonic() + 30
        while True:
            try:
                connection = websocket.create_connection(f"ws://127.0.0.1:{port}/notify", timeout=5)
                break
            except OSError:
                if time.monotonic() > deadline:
                    raise
                time.sleep(0.2)
        connection.send('{"messageId":"m1","timestamp":1,"streams":[]}')
        connection.close()
        out, err = listener.communicate(timeout=30)
    finally:
        listener.kill()
    assert out.strip() == '{"messageId":"m1","timestamp":1,"streams":[]}'
    assert "1 message(s) received" in err


def test_a_notification_is_claimed_by_one_deliverer_at_a_time(tmp_path: Path) -> None:
    from dagster_tdstream.storage.catalog import Notification

    catalog = Warehouse(str(tmp_path / "wh")).catalog
    catalog.record_notifications([Notification("d.s", "ws://127.0.0.1:1/n", f"k{i}", f"1:{i}", "{}") for i in range(3)])
    ids = [n.id for n in catalog.due_notifications(1000)]
    assert catalog.claim_notifications(ids[:2], now_ms=1000, until_ms=5000) == ids[:2]
    # the hook and the sensor at once: the second finds the first two held and stops there
    assert catalog.claim_notifications(ids, now_ms=1000, until_ms=5000) == []
    assert [n.due for n in catalog.due_notifications(2000)] == [False, False, True]
    assert catalog.claim_notifications(ids, now_ms=6000, until_ms=9000) == ids  # a lapsed lease frees them


def test_float_values_read_as_tdengine_prints_them(
    session: Session, harness: StreamHarness, receiver: Receiver
) -> None:
    session.execute(
        "create database d; use d; create table m (ts timestamp, current float);"
        f"create stream hi event_window(start with current > 11.5 end with current <= 11.5) from m "
        f"notify('{receiver.url}') on (window_open|window_close) into hi_out as select _twstart, max(current) peak "
        "from %%trows;"
        f"insert into m values ({T}, 11.946) ({T + 1000}, 12.3) ({T + 2000}, 10.1)"
    )
    assert harness.run_until_idle().failures == []
    opened, closed = receiver.events()
    assert opened["triggerCondition"] == {"conditionIndex": 0, "fieldValue": {"current": 11.946}}
    assert closed["triggerCondition"] == {"conditionIndex": 0, "fieldValue": {"current": 10.1}}
    assert closed["result"] == {"_twstart": T, "peak": 12.3}


def test_a_backfill_notifies_with_notify_history_only(
    session: Session, harness: StreamHarness, receiver: Receiver
) -> None:
    note = f"notify('{receiver.url}') on (window_close)"
    session.execute(
        SCHEMA + "create table a using st tags (1);"
        f"create stream loud interval(10s) sliding(10s) from a stream_options(ignore_disorder) {note} "
        "notify_options(notify_history) into l_out as select _twstart, sum(v) s from %%trows;"
        f"create stream quiet interval(10s) sliding(10s) from a stream_options(ignore_disorder) {note} "
        "into q_out as select _twstart, sum(v) s from %%trows;"
        f"insert into a values ({T}, 1, 0) ({T + 10000}, 2, 0)"
    )
    assert harness.run_until_idle().failures == []
    session.execute(f"insert into a values ({T + 1000}, 40, 0)")  # ignored by both streams
    session.execute(
        f"recalculate stream loud from {T} to {T + 10000}; recalculate stream quiet from {T} to {T + 10000}"
    )
    report = harness.run_until_idle()
    assert report.failures == [] and len(report.backfills) == 2
    # the backfill run's hook sent the recalculated window of the NOTIFY_HISTORY stream only
    assert [e["result"]["s"] for e in receiver.events("loud")] == [1, 41]
    assert [e["result"]["s"] for e in receiver.events("quiet")] == [1]


def test_messages_larger_than_a_frame_arrive_whole(tmp_path: Path, receiver: Receiver) -> None:
    from dagster_tdstream.storage.catalog import Notification

    warehouse = Warehouse(str(tmp_path / "wh"))
    Session(warehouse, timezone="UTC").execute(
        "create database d; use d; create table t (ts timestamp, v int);"
        f"create stream s count_window(1) from t notify('{receiver.url}') on (window_close)"
    )
    big = json.dumps({"triggerId": "1:1", "text": "é" * 3000})  # multi-byte text split across frames
    warehouse.catalog.record_notifications([Notification("d.s", receiver.url, "k", "1:1", big)])
    report = deliver(warehouse, DeliverySettings(frame_bytes=100, timeout_seconds=5))
    assert report.sent == 1
    assert receiver.events() == [json.loads(big)]


def test_datetime_results_become_epochs_in_the_precision() -> None:
    from datetime import UTC, datetime

    moment = datetime(2023, 11, 14, 22, 13, 20, tzinfo=UTC)
    assert json_value(moment, "ms") == T and json_value(moment, "us") == T * 1000


def test_legacy_streams_send_the_legacy_message_and_pause_on_failure_by_default(
    session: Session, warehouse: Warehouse, spark: object, receiver: Receiver
) -> None:
    """A legacy stream's NOTIFY sends the legacy message (``windowId``, ``windowType``: the
    same id for a window's open and close); ON_FAILURE is PAUSE unless DROP is written."""
    harness = StreamHarness(warehouse, timezone="UTC", notifier=TDStreamNotifier(backoff_seconds=0, timeout_seconds=5))
    session.execute(
        SCHEMA + "create table a using st tags (1);"
        "create stream s trigger window_close into out as select _wstart, count(*) n from st partition by tbname "
        f"interval(10s) notify ('{receiver.url}') on ('window_open', 'window_close');"
        "create stream s2 trigger at_once into out2 as select _wstart, count(*) n from a state_window(w) "
        f"notify ('{receiver.url}') on ('WINDOW_CLOSE') notify_history 0 on_failure drop;"
        f"insert into a values ({T}, 1, 0) ({T + 5000}, 2, 0) ({T + 10000}, 3, 1)"
    )
    assert harness.run_until_idle().failures == []
    uid = session.warehouse.catalog.get_table("d", "a").uid
    child = session.query("select table_name from information_schema.ins_tables where stable_name = 'out'").rows[0][0]
    opened, closed, opened2 = receiver.events("s")
    assert opened == {
        "tableName": child, "eventType": "WINDOW_OPEN", "eventTime": opened["eventTime"],
        "windowId": f"{uid}:{T}", "windowType": "Time", "groupId": str(uid), "windowStart": T,
    }  # fmt: skip
    assert closed == {
        "tableName": child, "eventType": "WINDOW_CLOSE", "eventTime": closed["eventTime"],
        "windowId": f"{uid}:{T}", "windowType": "Time", "groupId": str(uid), "windowStart": T,
        "windowEnd": T + 10000, "result": {"_wstart": T, "n": 2},
    }  # fmt: skip
    assert (opened2["windowId"], opened2["windowStart"]) == (f"{uid}:{T + 10000}", T + 10000)
    # AT_ONCE writes the open window too, and the legacy engine notifies WINDOW_CLOSE with every
    # result it writes
    state_closed, state_pushed = receiver.events("s2")
    assert _fields([state_closed], "eventType", "windowType", "windowStart", "windowEnd", "curState", "nextState") == [
        ("WINDOW_CLOSE", "State", T, T + 5000, 0, 1)
    ]
    assert "triggerId" not in state_closed and state_closed["result"]["n"] == 2
    assert _fields([state_pushed], "eventType", "windowId", "windowStart", "windowEnd") == [
        ("WINDOW_CLOSE", f"{state_closed['groupId']}:{T + 10000}", T + 10000, T + 10000)
    ]
    assert state_pushed["result"]["n"] == 1
    # the receiver goes away: s, with the legacy default PAUSE, stops; s2 (DROP) goes on
    receiver.stop()
    session.execute(f"insert into a values ({T + 20000}, 4, 2)")
    assert harness.run_until_idle().failures == []
    states = dict(session.query("select stream_name, status from information_schema.ins_streams").rows)
    assert states == {"s": "Paused", "s2": "Running"}


@pytest.mark.parametrize(
    ("notify", "message"),
    [
        ("notify ('ws://127.0.0.1:1') on ('window_close') notify_options(on_failure_pause)", "3.3.7 syntax"),
        ("notify ('ws://127.0.0.1:1') on ('window_close') notify_history 2", "NOTIFY_HISTORY is 0 or 1, got 2"),
        ("notify ('ws://127.0.0.1:1') on ('on_time')", "an event type (WINDOW_OPEN | WINDOW_CLOSE)"),
        ("notify ('ws://127.0.0.1:1') on ('window_close') on_failure drop on_failure pause", "ON_FAILURE given twice"),
    ],
)
def test_legacy_notify_options_are_checked(sql_session: Session, notify: str, message: str) -> None:
    sql_session.execute(SCHEMA)
    assert_rejected(
        sql_session,
        f"create stream s into out as select _wstart, count(*) from st interval(10s) {notify}",
        message,
    )
