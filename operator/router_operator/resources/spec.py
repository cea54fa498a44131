"""What every resource spec shares: strict validation, and rules stated once for CEL and Python.

Its own module so that the parts of a spec with a module of their own (resources/autoscaling.py,
resources/gateway.py) and resources/models.py build on the same base without importing each other.
"""

from __future__ import annotations

import re
from collections.abc import Callable
from dataclasses import dataclass
from typing import Annotated, Any, ClassVar, Self

from pydantic import AfterValidator, BaseModel, ConfigDict, WithJsonSchema, model_validator

# --- rules shared by the CRD (CEL) and the models (Python) ---------------------------------


@dataclass(frozen=True)
class Rule:
    """One validation rule, stated in CEL for the API server and in Python for the models.

    ``holds`` checks an object (``self`` in CEL); ``holds_on_update`` checks a change, with the
    old object as its second argument (``oldSelf``): the API server runs those on updates only,
    and so does :meth:`StrictSpec.check_update`. Keeping both spellings side by side, with one
    message, is what keeps them in step; the tests evaluate the CEL on sample objects and compare.
    """

    rule: str
    message: str
    holds: Callable[[Any], bool] | None = None
    holds_on_update: Callable[[Any, Any], bool] | None = None

    def cel(self) -> dict[str, str]:
        """The ``x-kubernetes-validations`` entry. Only ``rule`` and ``message``: the chart
        supports Kubernetes 1.25, and ``fieldPath``/``reason`` arrived in 1.28 (1.25 to 1.27
        refuse a CRD that has them under strict field validation, kubectl's default). Without
        them the API server reports a broken rule at the node that carries it, reason
        FieldValueInvalid; so a rule about one field sits on that field (:meth:`check` is then
        its Python twin), a rule about several on their object, and none on the resource root,
        where it would be reported at ``<nil>``: the name, the one part of metadata a CRD may
        constrain, is constrained by the schema of ``metadata.name`` instead (:class:`RouterMeta`).

        A rule reads an optional field only behind ``has()``, even one with a default: the API
        server evaluates every rule against the schema's ``default`` values when the CRD is
        created, as they are, without filling in the defaults nested in them (spec's ``{}``)."""
        return {"rule": self.rule, "message": self.message}

    def check(self, value: Any) -> Any:
        """The Python twin of a rule that sits on a field: ``holds`` gets the field's value."""
        if self.holds is not None and not self.holds(value):
            raise ValueError(self.message)
        return value


def _model_schema_extra(schema: dict[str, Any], cls: type[BaseModel]) -> None:
    rules: tuple[Rule, ...] = getattr(cls, "rules", ())
    if rules:
        schema["x-kubernetes-validations"] = [rule.cel() for rule in rules]


def _raise_broken(broken: list[Rule]) -> None:
    """Reports every broken rule at once, as the API server does."""
    if broken:
        raise ValueError("; ".join(rule.message for rule in broken))


class StrictSpec(BaseModel):
    """What users write. Strict, like the router's config: an unknown key or a string where a
    number belongs is an error here, as it is for ``kubectl apply`` (strict field validation),
    rather than something silently dropped."""

    model_config = ConfigDict(
        extra="forbid", strict=True, allow_inf_nan=False, json_schema_extra=_model_schema_extra
    )
    rules: ClassVar[tuple[Rule, ...]] = ()

    @model_validator(mode="after")
    def _rules_hold(self) -> Self:
        _raise_broken([rule for rule in self.rules if rule.holds and not rule.holds(self)])
        return self

    def check_update(self, old: Self) -> None:
        """Raises ValueError when changing ``old`` into this breaks a rule that only the API
        server's transition rules (``oldSelf``) would otherwise catch, e.g. in the local backend
        when a file changes."""
        _raise_broken(
            [
                rule
                for rule in self.rules
                if rule.holds_on_update is not None and not rule.holds_on_update(self, old)
            ]
        )


# --- constrained strings shared by the kinds ----------------------------------------------


def constrained(what: str, regex: str, max_length: int, hint: str) -> Any:
    """A string type checked by one regular expression, here and in the CRD alike.

    The API server (Go's RE2) and Python agree on these simple expressions; Python's
    ``fullmatch`` is used because ``$`` in Python also matches before a final newline.
    """
    compiled = re.compile(regex)

    def check(value: str) -> str:
        if len(value) > max_length or not compiled.fullmatch(value):
            raise ValueError(f"{value!r} is not a valid {what}: {hint}")
        return value

    schema = {"type": "string", "minLength": 1, "maxLength": max_length, "pattern": regex}
    return Annotated[str, AfterValidator(check), WithJsonSchema(schema)]


_DNS_SUBDOMAIN = r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*$"

SecretName = constrained(
    "Secret name", _DNS_SUBDOMAIN, 253, "a Kubernetes object name (DNS subdomain)"
)
"""What names a Secret, for every kind that mounts one (Router, LinkRoute, Gateway)."""
IssuerName = constrained(
    "issuer name", _DNS_SUBDOMAIN, 253, "a Kubernetes object name (DNS subdomain)"
)
"""What names a cert-manager Issuer or ClusterIssuer."""
StorageClassName = constrained(
    "StorageClass name", _DNS_SUBDOMAIN, 253, "a Kubernetes object name (DNS subdomain)"
)
