"""`routernet send`/`receive`/`request` without a network: the rate schedule and its pacer, the
resend ledger, the receiver's tally, endpoint URLs, global addresses' hosts and credentials,
spreading and a state directory's routers, messages as JSON lines, and the commands' one-line
errors (exit 2)."""

from __future__ import annotations

import json
import subprocess
import sys
import time
import uuid
from collections import Counter
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from proton import Message, symbol
from router_operator.cli import main as local_cli
from router_operator.local import backend as local
from router_operator.traffic import cli
from router_operator.traffic.endpoints import (
    EndpointError,
    Security,
    parse_url,
    rebalance,
    spread,
    state_endpoints,
    uri_endpoint,
    uri_security,
)
from router_operator.traffic.ledger import Ledger, Outcome, Tally
from router_operator.traffic.pool import SENDER, Pool
from router_operator.traffic.rate import (
    UNLIMITED,
    Pacer,
    RampError,
    Schedule,
    parse_ramp,
    schedule_for,
)
from router_operator.traffic.records import message_line, message_record

from router.addressing import parse_uri

# ----- the schedule -------------------------------------------------------------------------


def test_a_ramp_is_piecewise_linear_and_holds_its_ends() -> None:
    ramp = parse_ramp("0:100, 20:3000,60:3000,80:0")
    assert ramp.points == ((0, 100), (20, 3000), (60, 3000), (80, 0))
    assert ramp.rate_at(0) == 100
    assert ramp.rate_at(10) == pytest.approx(1550)
    assert ramp.rate_at(40) == 3000
    assert ramp.rate_at(70) == pytest.approx(1500)
    assert ramp.rate_at(80) == 0
    assert ramp.rate_at(1000) == 0
    assert ramp.ends_at == 80
    # Messages due: the area under the rate.
    assert ramp.due(0) == 0
    assert ramp.due(20) == pytest.approx((100 + 3000) / 2 * 20)
    assert ramp.due(80) == pytest.approx(31000 + 3000 * 40 + 3000 / 2 * 20)
    assert ramp.due(200) == ramp.due(80)


def test_a_step_and_a_start_after_zero() -> None:
    ramp = parse_ramp("5:10,10:10,10:100")
    assert ramp.rate_at(0) == 10  # the first rate holds before the first point
    assert ramp.rate_at(9.99) == 10
    assert ramp.rate_at(10) == 100  # after the step
    assert ramp.ends_at is None  # the last rate holds for ever
    assert ramp.due(10) == pytest.approx(100)
    assert ramp.due(12) == pytest.approx(300)


def test_a_steady_rate_and_unlimited() -> None:
    steady = schedule_for(250, None)
    assert steady == Schedule.steady(250)
    assert steady is not None and steady.due(2) == 500
    assert schedule_for(None, None) is None
    assert schedule_for(0, None) is None
    assert schedule_for(None, "0:5") == parse_ramp("0:5")


@pytest.mark.parametrize(
    ("spec", "why"),
    [
        ("", "is not T:R"),
        ("0:100,", "is not T:R"),
        ("0-100", "is not T:R"),
        ("0:1:2", "is not T:R"),
        ("a:100", "must be numbers"),
        ("0:100,10:x", "must be numbers"),
        ("10:100,5:200", "must not decrease"),
        ("0:-1", ">= 0"),
        ("-1:5", ">= 0"),
        ("0:inf", "finite"),
        ("0:nan", "finite"),
    ],
)
def test_bad_ramps_are_one_line_errors(spec: str, why: str) -> None:
    with pytest.raises(RampError, match=why) as info:
        parse_ramp(spec)
    assert "\n" not in str(info.value)


def test_negative_rate_is_refused() -> None:
    with pytest.raises(RampError, match=">= 0"):
        schedule_for(-5, None)


def test_the_pacer_follows_the_schedule_whatever_the_ticks() -> None:
    pacer = Pacer(Schedule.steady(1000))
    issued = 0
    t = 0.0
    for step in [0.003, 0.0071, 0.01, 0.013, 0.0005] * 40:
        t += step
        issued += pacer.allowance(t, issued)
    assert abs(1000 * t - issued) < 1  # no drift from rounding, whatever the tick lengths


def test_the_pacer_forgets_a_backlog_beyond_a_second() -> None:
    """A sender stalled for 10 s at 100 msgs/s may then send one second's worth, not 1000."""
    pacer = Pacer(Schedule.steady(100))
    assert pacer.allowance(10.0, 0) == 100
    assert pacer.allowance(10.0, 100) == 0
    assert pacer.allowance(10.5, 100) == 50  # and it goes on at the rate from there
    assert pacer.target(3) == 100


def test_the_pacer_on_a_ramp_and_unlimited() -> None:
    pacer = Pacer(parse_ramp("0:0,10:200,20:0"))
    issued = 0
    for i in range(1, 301):
        issued += pacer.allowance(i / 10, issued)
    assert issued == 2000  # the triangle's area
    assert Pacer(None).allowance(5, 10**6) == UNLIMITED
    assert Pacer(None).target(5) is None


# ----- the sender's ledger -----------------------------------------------------------------


def test_accepted_and_rejected_are_done_released_and_modified_go_again() -> None:
    ledger = Ledger("s")
    seqs = [ledger.create() for _ in range(4)]
    assert [ledger.message_id(s) for s in seqs] == ["s:0", "s:1", "s:2", "s:3"]
    attempts = [ledger.dispatch(s, "link1") for s in seqs]
    assert (ledger.sent, ledger.in_flight, ledger.unresolved) == (4, 4, 4)
    assert ledger.settle(attempts[0], Outcome.ACCEPTED) == 0
    assert ledger.settle(attempts[1], Outcome.REJECTED) == 1
    ledger.settle(attempts[2], Outcome.RELEASED)
    ledger.settle(attempts[3], Outcome.MODIFIED)
    assert (ledger.accepted, ledger.rejected, ledger.queued, ledger.unresolved) == (1, 1, 2, 2)
    assert ledger.next_resend() == 2
    assert ledger.next_resend() == 3
    assert ledger.next_resend() is None
    again = ledger.dispatch(2, "link2"), ledger.dispatch(3, "link2")
    assert ledger.resent == 2
    for attempt in again:
        ledger.settle(attempt, Outcome.ACCEPTED)
    assert (ledger.sent, ledger.accepted, ledger.unresolved, ledger.in_flight) == (4, 3, 0, 0)


def test_a_lost_carrier_sends_its_attempts_again_and_late_outcomes_are_ignored() -> None:
    ledger = Ledger("s")
    on_a = [ledger.dispatch(ledger.create(), ("a", 1)) for _ in range(3)]
    on_b = ledger.dispatch(ledger.create(), ("b", 1))
    ledger.settle(on_a[0], Outcome.ACCEPTED)
    assert ledger.in_flight_on(("a", 1)) == 2
    assert ledger.lost(("a", 1)) == 2
    assert ledger.lost(("a", 1)) == 0
    assert ledger.in_flight_on(("a", 1)) == 0
    assert (ledger.in_flight, ledger.queued, ledger.unresolved) == (1, 2, 3)
    # An outcome for an attempt given up (it raced the close) counts for nothing.
    assert ledger.settle(on_a[1], Outcome.ACCEPTED) is None
    assert ledger.accepted == 1
    resends = []
    while (seq := ledger.next_resend()) is not None:
        resends.append((seq, ledger.dispatch(seq, ("a", 2))))
    assert [seq for seq, _ in resends] == [1, 2]  # in the order they were first sent
    for _, attempt in resends:
        ledger.settle(attempt, Outcome.ACCEPTED)
    ledger.settle(on_b, Outcome.ACCEPTED)
    assert (ledger.accepted, ledger.resent, ledger.unresolved) == (4, 2, 0)


def test_settled_without_an_outcome_is_sent_again() -> None:
    ledger = Ledger("s")
    attempt = ledger.dispatch(ledger.create(), "c")
    ledger.settle(attempt, None)
    assert ledger.next_resend() == 0 and ledger.unresolved == 1


def test_the_ledger_keeps_only_what_is_outstanding() -> None:
    ledger = Ledger("s")
    for _ in range(10_000):
        ledger.settle(ledger.dispatch(ledger.create(), "c"), Outcome.ACCEPTED)
    assert ledger.accepted == 10_000
    assert not ledger._outstanding and not ledger._attempts and not ledger._by_carrier


def test_the_tally_counts_duplicates_by_message_id() -> None:
    tally = Tally()
    assert [tally.record(i) for i in ["a:0", "a:1", "a:0", None, None, "a:1", "a:0"]] == [
        True,
        True,
        False,
        True,
        True,
        False,
        False,
    ]
    assert (tally.received, tally.distinct, tally.duplicates) == (7, 4, 3)


# ----- endpoints ----------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("url", "expected"),
    [
        ("amqp://127.0.0.2:5673", "amqp://127.0.0.2:5673"),
        ("amqp://router", "amqp://router:5672"),
        ("127.0.0.3:7000", "amqp://127.0.0.3:7000"),
        ("localhost", "amqp://localhost:5672"),
        ("amqp://[::1]:5672/", "amqp://[::1]:5672"),
    ],
)
def test_urls(url: str, expected: str) -> None:
    assert parse_url(url) == expected


@pytest.mark.parametrize(
    ("url", "why"),
    [
        ("amqps://h:5671", "only amqp://"),
        ("http://h", "only amqp://"),
        ("amqp://h:99999", "out of range"),
        ("amqp://h:port", "bad URL"),
        ("amqp://:5672", "no host"),
        ("amqp://u:p@h", "credentials"),
        ("amqp://h/queue", "scheme, host and port only"),
    ],
)
def test_bad_urls(url: str, why: str) -> None:
    with pytest.raises(EndpointError, match=why):
        parse_url(url)


@pytest.mark.parametrize(
    ("text", "endpoint"),
    [
        ("amqps://gw.example.com/(london-branch-34)/atm", "amqps://gw.example.com:5671"),
        ("amqp://127.0.0.2/q", "amqp://127.0.0.2:5672"),
        ("amqp://[::1]:7000/q", "amqp://[::1]:7000"),
    ],
)
def test_a_uris_endpoint(text: str, endpoint: str) -> None:
    assert uri_endpoint(parse_uri(text)) == endpoint


def test_credentials_come_from_the_uri_before_the_environment(tmp_path: Path) -> None:
    env = {"ROUTERNET_USER": "env-user", "ROUTERNET_PASSWORD": "env-pw"}
    assert uri_security(parse_uri("amqp://h/q"), {}) == Security()
    assert uri_security(parse_uri("amqp://h/q"), env) == Security(
        user="env-user", password="env-pw"
    )
    assert uri_security(parse_uri("amqp://al%40x:k@h/q"), env) == Security(
        user="al@x", password="k"
    )
    assert uri_security(parse_uri("amqp://al@h/q"), env) == Security(user="al", password="env-pw")
    assert uri_security(parse_uri("amqp://al:@h/q"), env) == Security(user="al", password="")
    assert uri_security(parse_uri("amqp://h/q"), {"ROUTERNET_PASSWORD": "pw"}) == Security()
    ca = tmp_path / "ca.pem"
    ca.write_text("")
    assert uri_security(parse_uri("amqps://h/q"), {}, ca=str(ca)) == Security(tls=True, ca=str(ca))
    with pytest.raises(EndpointError, match="no password for user 'al'"):
        uri_security(parse_uri("amqp://al@h/q"), {})


def test_the_routing_address_of_each_form() -> None:
    def target(*argv: str) -> cli.Target:
        args = local_cli._parser().parse_args(["send", *argv])
        return cli._target(args)

    gateway = target("amqps://gw.example.com/(london-branch-34)/atm")
    assert gateway.address == "(london-branch-34)/atm"
    assert gateway.source() == ["amqps://gw.example.com:5671"]
    assert gateway.security.tls
    for bare, routing in [
        ("queue1", "queue1"),
        ("amqp:queue1", "queue1"),
        ("(c)/node", "(c)/node"),
        ("amqp:()/control", "()/control"),
        ("$x", "$x"),
    ]:
        found = target(bare, "--url", "amqp://127.0.0.2:5672")
        assert (found.address, found.source()) == (routing, ["amqp://127.0.0.2:5672"])
        assert found.security == Security()


def test_a_message_as_a_json_line() -> None:
    message = Message(
        id="m:1",
        subject="s",
        reply_to="amqp:/_topo/0/R1/temp.x",
        correlation_id=uuid.UUID(int=1),
        properties={"k": "v", "n": 3, "b": b"\xffok"},
        body={symbol("key"): [b"text", 1.5, None], 7: True},
        durable=True,
        priority=9,
    )
    assert message_record(message) == {
        "body": {"key": ["text", 1.5, None], "7": True},
        "header": {"durable": True, "priority": 9},
        "properties": {
            "message_id": "m:1",
            "subject": "s",
            "reply_to": "amqp:/_topo/0/R1/temp.x",
            "correlation_id": "00000000-0000-0000-0000-000000000001",
        },
        "application_properties": {"k": "v", "n": 3, "b": "\\xffok"},
    }
    assert json.loads(message_line(Message(body="hi"))) == {
        "body": "hi",
        "header": {},
        "properties": {},
        "application_properties": {},
    }


def test_spread_round_robin_and_one_each() -> None:
    assert spread(["b", "a", "c"], None) == Counter({"a": 1, "b": 1, "c": 1})
    assert spread(["a", "b"], 5) == Counter({"a": 3, "b": 2})
    assert spread(["a", "b"], 5, offset=1) == Counter({"b": 3, "a": 2})
    assert spread(["a", "b", "c"], 2, offset=2) == Counter({"c": 1, "a": 1})
    assert spread([], 4) == Counter()


def test_rebalance_moves_only_the_difference() -> None:
    current = {"a": 3, "b": 2}
    # c appears: five connections over three routers.
    to_open, to_retire = rebalance(current, spread(["a", "b", "c"], 5))
    assert (to_open, to_retire) == (Counter({"c": 1}), Counter({"a": 1}))
    # b goes away: its two move to a.
    to_open, to_retire = rebalance(current, spread(["a"], 5))
    assert (to_open, to_retire) == (Counter({"a": 2}), Counter({"b": 2}))
    assert rebalance(current, Counter(current)) == (Counter(), Counter())


def wait_exec(pid: int, marker: str) -> None:
    """Until the child has exec'd (before that, its command line is still ours)."""
    deadline = time.monotonic() + 5.0
    while marker.encode() not in Path(f"/proc/{pid}/cmdline").read_bytes():
        assert time.monotonic() < deadline, f"process {pid} did not start"
        time.sleep(0.01)


@pytest.fixture
def state_dir(tmp_path: Path) -> Iterator[Path]:
    """A state directory of two Routers: core-0 and core-1 'running' (a sleeping process with
    their config file on its command line, which is what local.running_pid looks for),
    edge-0 not running, and a pod without a client listener."""
    state = tmp_path / "state"
    (state / "pids").mkdir(parents=True)
    procs = []
    pods = {}
    for i, (name, router, running, clients) in enumerate(
        [
            ("core-1", "core", True, ["127.0.0.3:5672"]),
            ("core-0", "core", True, ["127.0.0.2:5672", "127.0.0.2:5673"]),
            ("edge-0", "edge", False, ["127.0.0.4:5672"]),
            ("rc-0", "rc", True, []),
        ]
    ):
        pods[name] = {"router": router, "mode": "interior", "clientEndpoints": clients}
        if running:
            config = local.config_path(state, name)
            sleep = "import time; time.sleep(60)"
            proc = subprocess.Popen([sys.executable, "-c", sleep, "--config", str(config)])
            procs.append(proc)
            (state / "pids" / f"{name}.pid").write_text(str(proc.pid))
            wait_exec(proc.pid, str(config))
        else:
            (state / "pids" / f"{name}.pid").write_text(str(1_000_000 + i))
    local.State(pods=pods).save(state)
    try:
        yield state
    finally:
        for proc in procs:
            proc.kill()
            proc.wait()


def test_the_running_routers_of_a_state_directory(state_dir: Path) -> None:
    assert state_endpoints(state_dir) == ["amqp://127.0.0.2:5672", "amqp://127.0.0.3:5672"]
    assert state_endpoints(state_dir, "core") == ["amqp://127.0.0.2:5672", "amqp://127.0.0.3:5672"]
    assert state_endpoints(state_dir, "edge") == []  # known, not running
    with pytest.raises(EndpointError, match=r"no Router 'nope' .*Routers: core, edge, rc"):
        state_endpoints(state_dir, "nope")
    with pytest.raises(EndpointError, match="no network in"):
        state_endpoints(state_dir / "elsewhere")


# ----- the commands' errors -----------------------------------------------------------------


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["send", "q", "--ramp", "0:10,5"], "routernet send: bad --ramp '0:10,5': '5' is not T:R"),
        (["send", "q", "--rate", "-3"], "routernet send: bad --rate -3: must be a finite"),
        (["send", "q", "--url", "amqps://h"], "routernet send: bad URL 'amqps://h': only amqp://"),
        (["receive", "q", "--url", "h", "--router", "core"], "routernet receive: --router picks"),
        (["send", "q", "--router", "nope"], "routernet send: no Router 'nope'"),
        (["receive", "q", "--router", "edge"], "routernet receive: no router endpoints found"),
        (["send", "q", "--state-dir", "/nonexistent"], "routernet send: no network in"),
        (["send", "queue(1)"], "routernet send: bad address 'queue(1)': parentheses"),
        (["receive", "(c"], "routernet receive: bad address '(c': unbalanced '('"),
        (["request", "amqp:(c)/"], "routernet request: bad address 'amqp:(c)/': no node path"),
        (["send", "http://h/q"], "routernet send: bad address 'http://h/q': unknown scheme"),
        (["request", "amqps://h:0/q"], "routernet request: bad address 'amqps://h:0/q': port 0"),
        (["receive", "amqp://h/q", "--url", "h"], "routernet receive: ADDRESS names its host (h)"),
        (["send", "amqp://h/q", "--router", "core"], "routernet send: ADDRESS names its host (h)"),
        (["send", "q", "--ca", "ca.pem"], "routernet send: --ca, --cert and --key are for"),
        (["request", "amqp://h/q", "--ca", "ca"], "routernet request: --ca, --cert and --key"),
        (["request", "amqps://h/q", "--cert", "c"], "routernet request: --cert and --key go"),
        (["request", "amqps://h/q", "--ca", "/nonexistent"], "routernet request: --ca /nonex"),
        (["request", "amqp://bob@h/q"], "routernet request: no password for user 'bob'"),
        (["send", "q", "--property", "seq=1"], "routernet send: --property seq: send sets"),
        (["request", "q", "--router", "edge"], "routernet request: no router endpoints found"),
    ],
)
def test_errors_before_any_traffic_are_one_line_and_exit_2(
    state_dir: Path,
    capsys: pytest.CaptureFixture[str],
    monkeypatch: pytest.MonkeyPatch,
    args: list[str],
    message: str,
) -> None:
    monkeypatch.delenv("ROUTERNET_PASSWORD", raising=False)
    if "--state-dir" not in args:
        args = [*args, "--state-dir", str(state_dir)]
    assert local_cli.main(args) == 2
    out, err = capsys.readouterr()
    assert out == ""
    assert err.startswith(message), err
    assert err.count("\n") == 1


@pytest.mark.parametrize(
    "args",
    [
        ["send", "q", "--rate", "5", "--ramp", "0:5"],
        ["send", "q", "--count", "0"],
        ["send", "q", "--connections", "x"],
        ["receive", "q", "--idle", "-1"],
        ["receive", "q", "--body-size", "5"],
        ["send", "q", "--body", "x", "--body-size", "5"],
        ["send", "q", "--property", "no-value"],
        ["request", "q", "--property", "=v"],
        ["request", "q", "--count", "3"],
        ["request", "q", "--timeout", "soon"],
        ["receive", "q", "--body", "x"],
    ],
)
def test_usage_errors_exit_2(args: list[str], capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as info:
        local_cli.main(args)
    assert info.value.code == 2
    assert "usage: routernet" in capsys.readouterr().err


def test_the_pool_gives_up_after_wait_without_a_first_attach() -> None:
    now = [100.0]
    owner: Any = object()

    def pool(wait: float | None) -> Pool:
        return Pool(None, SENDER, "q", lambda: [], owner, clock=lambda: now[0], wait=wait)

    waiting, patient = pool(5.0), pool(None)
    assert waiting.unreachable(104.9) is None
    assert waiting.unreachable(105.0) == (
        "no router reached in 5 s (no router endpoint); --wait SECONDS tries longer"
    )
    waiting.problem = "amqp://127.0.0.1:1: proton:io: Connection refused"
    assert "in 5 s (amqp://127.0.0.1:1: proton:io: Connection refused)" in str(
        waiting.unreachable(200.0)
    )
    waiting.reached = True  # once attached, losses are retried for as long as it runs
    assert waiting.unreachable(10_000.0) is None
    assert patient.unreachable(10_000.0) is None


def test_send_and_receive_wait_ten_seconds_unless_told() -> None:
    for command in ("send", "receive"):
        assert local_cli._parser().parse_args([command, "q"]).wait == cli.WAIT_SECONDS == 10.0
        args = local_cli._parser().parse_args([command, "q", "--wait", "120"])
        assert args.wait == 120.0
