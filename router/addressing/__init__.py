"""Addresses: Dispatch's classes and keys (dispatch.py), address rules (rules.py)."""

from router.addressing.dispatch import (
    CONTAINER_KEY,
    MANAGEMENT_ADDRESS,
    Destination,
    Kind,
    parse,
)
from router.addressing.rules import (
    DEFAULT_RULE,
    DISTRIBUTIONS,
    UNDELIVERABLE_ACTIONS,
    AddressRule,
    AddressTable,
    TokenTree,
    rule_tokens,
)

__all__ = [
    "CONTAINER_KEY",
    "DEFAULT_RULE",
    "DISTRIBUTIONS",
    "MANAGEMENT_ADDRESS",
    "UNDELIVERABLE_ACTIONS",
    "AddressRule",
    "AddressTable",
    "Destination",
    "Kind",
    "TokenTree",
    "parse",
    "rule_tokens",
]
