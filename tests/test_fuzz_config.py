"""Fuzzing the configuration a router takes while running (its file, its ConfigMap pushed
through the API): whatever the text, it is refused with a one-line ConfigError or accepted;
nothing else escapes to the event loop (router/config/live.py catches ConfigError only)."""

from __future__ import annotations

import json
from typing import Any

from hypothesis import given, settings
from hypothesis import strategies as st

from router.config.models import ConfigError, parse_config_text, validate_config

VALID: dict[str, Any] = {
    "router": {"id": "R1", "mode": "interior"},
    "listeners": [{"host": "127.0.0.1", "port": 5672}, {"port": 55672, "role": "inter-router"}],
    "connectors": [{"host": "r2", "port": 55672, "role": "inter-router", "cost": 2}],
    "addresses": [{"prefix": "orders", "distribution": "closest"}],
    "linkRoutes": [{"prefix": "q", "direction": "in", "connection": "broker"}],
}

leaves = st.one_of(
    st.none(),
    st.booleans(),
    st.integers(min_value=-(2**70), max_value=2**70),
    st.floats(),
    st.text(max_size=30),
    st.sampled_from(["", "0.0.0.0", "amqp", "interior", "edge", "both", "multicast", "*", "#"]),
)
values = st.recursive(
    leaves,
    lambda inner: (
        st.lists(inner, max_size=4) | st.dictionaries(st.text(max_size=12), inner, max_size=4)
    ),
    max_leaves=12,
)


@st.composite
def mutated(draw: Any) -> dict[str, Any]:
    """The valid configuration with a few values, keys or sections replaced."""
    config = json.loads(json.dumps(VALID))
    for _ in range(draw(st.integers(1, 4))):
        section = draw(st.sampled_from(sorted(config)))
        target = config[section]
        if isinstance(target, list) and target and draw(st.booleans()):
            target = target[draw(st.integers(0, len(target) - 1))]
        if isinstance(target, dict) and target:
            key = draw(st.sampled_from(sorted(target)) | st.text(max_size=10))
            target[key] = draw(values)
        else:
            config[section] = draw(values)
    return config


def checked(load: Any) -> None:
    try:
        load()
    except ConfigError as e:
        assert "\n" not in str(e) and str(e)


@settings(max_examples=400, derandomize=True, deadline=None, database=None)
@given(mutated())
def test_any_mutated_configuration_is_accepted_or_refused_in_one_line(
    config: dict[str, Any],
) -> None:
    checked(lambda: validate_config(config))


@settings(max_examples=300, derandomize=True, deadline=None, database=None)
@given(st.text(max_size=200), st.sampled_from(["R1.json", "router.yaml"]))
def test_any_text_parses_or_is_refused_in_one_line(text: str, key: str) -> None:
    checked(lambda: validate_config(parse_config_text(text, key)))
