"""Dispatch's policy rules without a router (router/policy/matching.py, admission.py) and the
configuration that carries them (router/config/policy.py): lists and patterns matched as
Dispatch matches them, the vhost, group and limits chosen, the counters kept, and a setting
Dispatch would misread refused with a one-line reason."""

from __future__ import annotations

from typing import Any

import pytest
from pydantic import ValidationError

from router.config.models import RouterConfig
from router.config.policy import PolicySettings, Vhost
from router.config.views import ConfigError
from router.policy.admission import (
    CONNECTION_DENIED,
    LINK_DENIED,
    RESOURCE_LIMIT,
    SESSION_DENIED,
    UNAUTHORIZED,
    Connection,
    Denial,
    Policy,
)
from router.policy.matching import Hosts, PatternList, PlainList


def test_plain_lists_match_names_prefixes_and_the_user() -> None:
    # Dispatch's own cases (tests/policy_test.c).
    assert not PlainList(["joe"]).allows("joey", "u")
    assert PlainList(["joe*"]).allows("joey", "u")
    assert PlainList(["joe*"]).allows("joe", "u")
    assert PlainList(["e", "ab${user}xyz"]).allows("abchuckxyz", "chuck")
    assert PlainList(["e", "ab${user}*"]).allows("abchuckzyxw", "chuck")
    assert PlainList(["*"]).allows("anything", "u")
    assert not PlainList(["addr/*"]).allows("addr", "u")  # '*' ends the prefix, not a token
    assert PlainList(["addr/*"]).allows("addr/something", "u")
    assert not PlainList(["*"]).allows("", "u")  # an empty address never
    assert not PlainList([]).allows("x", "u")


def test_patterns_match_tokens_and_the_user_as_a_whole_first_or_last_token() -> None:
    patterns = PatternList(["addr/*/queue/*", "simpleaddress", "queue.${user}"])
    assert patterns.allows("addr/something/queue/one", "anonymous")
    assert patterns.allows("simpleaddress", "anonymous")
    assert patterns.allows("queue.anonymous", "anonymous")
    assert not patterns.allows("addr/queue/one", "anonymous")
    assert not patterns.allows("simpleaddress1", "anonymous")
    assert not patterns.allows("queue.user", "anonymous")
    first = PatternList(["${user}.#"])
    assert first.allows("motronic", "motronic")
    assert first.allows("motronic.stubs.wobbler", "motronic")
    assert not first.allows("motronicx.stubs", "motronic")
    exact = PatternList(["${user}.xyz"])
    assert exact.allows("chuck.xyz", "chuck") and not exact.allows("chuck.xyz.ynot", "chuck")
    last = PatternList(["abc.${user}"])
    assert last.allows("abc.chuck", "chuck")
    assert not last.allows("abc.ynot.chuck", "chuck")
    assert not last.allows("abc.achuck", "chuck")
    assert PatternList(["#"]).allows("a.b/c", "u")


def test_remote_hosts_are_addresses_ranges_or_any() -> None:
    hosts = Hosts(["10.48.0.0-10.48.255.255", "127.0.0.1"])
    assert hosts.allows("10.48.3.4") and hosts.allows("127.0.0.1")
    assert not hosts.allows("10.49.0.1") and not hosts.allows("::1")
    assert Hosts(["*"]).allows("::1")
    assert hosts.allows("::ffff:127.0.0.1")  # an IPv4 client on a dual-stack listener
    assert not Hosts([]).allows("127.0.0.1")  # none given: nowhere


# ----- admission --------------------------------------------------------------------------------


def policy(**vhost: Any) -> Policy:
    config = RouterConfig.model_validate(
        {
            "router": {"id": "P"},
            "policy": {"enableVhostPolicy": True, "maxConnections": 3, "maxMessageSize": 500},
            "vhosts": [
                {
                    "hostname": "v",
                    "aliases": "v.example, v2",
                    "maxConnections": 4,
                    "maxConnectionsPerUser": 2,
                    "maxConnectionsPerHost": 3,
                    "allowUnknownUser": True,
                    "groups": {
                        "ops": {
                            "users": "ann, ben",
                            "remoteHosts": "*",
                            "maxConnectionsPerUser": 1,
                            "maxMessageSize": 0,
                            "sources": "*",
                            "targets": "*",
                            "maxSenders": 1,
                            "maxReceivers": 0,
                        },
                        "$default": {"remoteHosts": "*"},
                    },
                    **vhost,
                },
                {"hostname": "$default", "groups": {"g": {"users": "zed", "remoteHosts": "*"}}},
            ],
        }
    )
    return Policy(config.policy, config.vhosts)


def admit(p: Policy, user: str, vhost: str = "v", host: str = "127.0.0.1", port: int = 1) -> Any:
    return p.admit(user, vhost, host, f"{host}:{port}")


def test_a_user_gets_its_group_then_the_star_group_then_default() -> None:
    p = policy()
    ann = admit(p, "ann")
    assert isinstance(ann, Connection) and ann.group.name == "ops"
    assert admit(p, "carl").group.name == "$default"
    # A group naming '*' takes every user no group names, before $default: here only from
    # 10.0.0.1, so carl from 127.0.0.1 is refused.
    p = policy(
        allowUnknownUser=False,
        groups={"ops": {"users": "ann"}, "rest": {"users": "*", "remoteHosts": "10.0.0.1"}},
    )
    assert admit(p, "carl", host="10.0.0.1").group.name == "rest"
    refused = admit(p, "carl")
    assert refused == Denial(RESOURCE_LIMIT, CONNECTION_DENIED, refused.reason)
    assert "network host" in refused.reason
    assert "network host" in admit(p, "ann").reason  # ops: no remoteHosts, so from nowhere


def test_the_vhost_is_the_hostname_an_alias_or_the_default() -> None:
    p = policy()
    assert admit(p, "ann", vhost="v.example").stats.hostname == "v"
    assert admit(p, "zed", vhost="elsewhere").stats.hostname == "$default"
    unnamed = policy()
    unnamed.settings.defaultVhost = ""
    assert "No policy defined" in admit(unnamed, "zed", vhost="elsewhere").reason


def test_connection_limits_per_user_per_host_and_in_all_with_counts() -> None:
    p = policy()
    first = admit(p, "ann", port=1)
    assert "per user limit" in admit(p, "ann", port=2).reason  # ops: 1 per user
    first.close()
    assert isinstance(admit(p, "ann", port=3), Connection)
    assert isinstance(admit(p, "ben", port=4), Connection)
    assert isinstance(admit(p, "dee", port=5), Connection)  # $default, per user from the vhost
    assert "per host limit" in admit(p, "dee", port=6).reason  # 3 from 127.0.0.1
    assert isinstance(admit(p, "eve", host="10.9.9.9"), Connection)  # the vhost's 4th
    assert "application connection limit" in admit(p, "fay", host="10.9.9.8").reason
    stats = p.stats["v"].row()
    assert stats["connectionsApproved"] == 5
    assert stats["connectionsDenied"] == 3
    assert stats["connectionsCurrent"] == 4
    assert stats["perUserState"] == {
        "ann": ["127.0.0.1:3"],
        "ben": ["127.0.0.1:4"],
        "dee": ["127.0.0.1:5"],
        "eve": ["10.9.9.9:1"],
    }
    assert stats["perHostState"] == {
        "127.0.0.1": ["127.0.0.1:3", "127.0.0.1:4", "127.0.0.1:5"],
        "10.9.9.9": ["10.9.9.9:1"],
    }


def test_the_router_wide_limit_counts_sockets() -> None:
    p = policy()
    assert [p.accept() for _ in range(4)] == [True, True, True, False]
    p.released()
    assert p.accept()
    c = p.counters
    assert (c.connectionsProcessed, c.connectionsDenied, c.connectionsCurrent) == (5, 1, 3)


def test_message_size_comes_from_the_group_then_the_vhost_then_the_policy() -> None:
    p = policy(maxMessageSize=900)
    assert admit(p, "ann").max_message_size == 0  # the group's explicit 0: no limit
    assert admit(p, "dee", port=2).max_message_size == 900
    assert policy().vhost("v") is not None
    assert admit(policy(), "dee").max_message_size == 500


def test_links_and_sessions_are_counted_and_limited() -> None:
    p = policy()
    ann = admit(p, "ann")
    assert ann.attach(True, "a", False, None) is None
    assert ann.attach(True, "b", False, None) == Denial(
        RESOURCE_LIMIT, LINK_DENIED, "maxSenders limit"
    )
    for _ in range(5):  # maxReceivers 0: no limit
        assert ann.attach(False, "a", False, None) is None
    ann.detached(True)
    assert ann.attach(True, "b", False, None) is None
    dee = admit(p, "dee", port=2)  # $default: no sources or targets at all
    denied = dee.attach(False, "x", False, None)
    assert denied is not None and denied.condition == UNAUTHORIZED
    assert dee.attach(False, None, True, None) is not None  # dynamic: not allowed
    assert dee.attach(True, None, False, None) is not None  # anonymous relay: not allowed
    stats = p.stats["v"]
    assert (stats.senderDenied, stats.receiverDenied) == (2, 2)
    assert p.counters.linksDenied == 4
    assert dee.begin() is None  # maxSessions 0: no limit


def test_waypoint_and_fallback_capabilities_can_be_refused() -> None:
    p = policy()
    ann = admit(p, "ann")
    ann.settings.allowWaypointLinks = False
    ann.settings.allowFallbackLinks = False
    assert ann.attach(True, "a", False, "qd.waypoint.1") is not None
    assert ann.attach(True, "a", False, "qd.fallback") is not None
    assert ann.attach(False, "a", False, "other") is None
    assert p.stats["v"].senderDenied == 2


def test_sessions_over_max_sessions_are_refused() -> None:
    p = policy()
    ann = admit(p, "ann")
    ann.settings.maxSessions = 2
    assert ann.begin() is None and ann.begin() is None
    assert ann.begin() == Denial(RESOURCE_LIMIT, SESSION_DENIED, "session limit")
    ann.ended()
    assert ann.begin() is None
    assert p.stats["v"].sessionDenied == 1


def test_a_live_change_keeps_the_counts_and_admitted_connections() -> None:
    p = policy()
    ann = admit(p, "ann")
    config = RouterConfig.model_validate(
        {
            "router": {"id": "P"},
            "policy": {"enableVhostPolicy": True},
            "vhosts": [
                {
                    "hostname": "v",
                    "maxConnections": 0,
                    "allowUnknownUser": True,
                    "groups": {"$default": {"remoteHosts": "*"}},
                }
            ],
        }
    )
    p.configure(config.policy, config.vhosts)
    assert "application connection limit" in admit(p, "ben").reason
    assert p.stats["v"].connectionsApproved == 1
    ann.close()
    assert p.stats["v"].connectionsCurrent == 0


# ----- configuration ----------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("vhost", "message"),
    [
        (
            {"groups": {"a": {"users": "x", "sources": "a", "sourcePattern": "b"}}},
            "sources and sourcePattern exclude each other",
        ),
        ({"groups": {"a": {"users": "x", "remoteHosts": "10.0.0.9-10.0.0.1"}}}, "LOW-HIGH"),
        ({"groups": {"a": {"users": "x", "remoteHosts": "localhost"}}}, "not an IP address"),
        ({"groups": {"a": {"users": "x", "targetPattern": "a.${user}x"}}}, "first or last"),
        ({"groups": {"a": {"users": "x", "targets": "${user}.${user}"}}}, "more than once"),
        # Dispatch reads "True" as false: refused rather than read either way.
        ({"groups": {"a": {"users": "x", "allowDynamicSource": "True"}}}, "write true or false"),
        ({"groups": {"a": {"users": "x"}, "b": {"users": "x"}}}, "is in two groups"),
        ({"groups": {"a": {"remoteHosts": "*"}}}, "no users"),
        ({"allowUnknownUser": True}, "needs a '\\$default' group"),
        ({"maxConnections": 70000}, "less than or equal to 65535"),
        ({"aliases": "v"}, "aliases must differ"),
    ],
)
def test_settings_dispatch_would_misread_are_refused(vhost: dict[str, Any], message: str) -> None:
    with pytest.raises(ValidationError, match=message):
        Vhost.model_validate({"hostname": "v", **vhost})


def test_a_bad_policy_is_one_line_naming_where() -> None:
    config = {"router": {"id": "P"}, "vhosts": [{"hostname": "v", "maxConnections": -1}]}
    with pytest.raises(ValidationError) as err:
        RouterConfig.model_validate(config)
    line = str(ConfigError.from_validation(err.value))
    assert line.startswith("vhosts[0].maxConnections: -1 is invalid") and "\n" not in line


def test_two_vhosts_may_not_share_a_name() -> None:
    with pytest.raises(ValueError, match="'w' names both 'v' and 'w'"):
        RouterConfig.model_validate(
            {
                "router": {"id": "P"},
                "vhosts": [{"hostname": "v", "aliases": "w"}, {"hostname": "w"}],
            }
        )


def test_the_policy_defaults_are_dispatchs() -> None:
    settings = PolicySettings()
    assert (settings.maxConnections, settings.maxMessageSize) == (65535, 0)
    assert not settings.enableVhostPolicy and settings.defaultVhost == "$default"
