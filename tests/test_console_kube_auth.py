"""``routernet console --kubernetes`` over several namespaces (the chart's ``console.namespaces``):
the command takes ``--namespace`` once per namespace, and a bearer token's user must be allowed
to list Routers in each of them (router_operator/console/auth.py), or anywhere when the console
shows every namespace. Against a fake API: no network."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from router_operator.cli.main import _parser
from router_operator.console.auth import TokenReviewAuth


class FakeApi:
    """Answers TokenReviews (one known token) and SubjectAccessReviews (by namespace)."""

    server = "https://10.96.0.1:443"

    def __init__(self, allowed: set[str | None]) -> None:
        self.allowed = allowed
        self.reviews: list[str | None] = []

    def request(self, method: str, path: str, *, body: Any = None, **_: Any) -> Mapping[str, Any]:
        assert method == "POST"
        if path.endswith("/tokenreviews"):
            ok = body["spec"]["token"] == "good"
            user = {"username": "alice", "groups": ["devs"], "uid": "u-1"}
            return {"status": {"authenticated": ok, "user": user if ok else {}}}
        attributes = body["spec"]["resourceAttributes"]
        assert (body["spec"]["user"], body["spec"]["groups"]) == ("alice", ["devs"])
        assert (attributes["verb"], attributes["resource"]) == ("list", "routers")
        namespace = attributes.get("namespace")
        self.reviews.append(namespace)
        return {"status": {"allowed": namespace in self.allowed}}


def test_the_user_must_be_allowed_in_every_namespace_shown() -> None:
    api = FakeApi({"demo"})
    auth = TokenReviewAuth(api, ["demo", "other"])  # type: ignore[arg-type]
    assert auth.user("Bearer good") is None
    assert api.reviews == ["demo", "other"]
    api = FakeApi({"demo", "other"})
    auth = TokenReviewAuth(api, ["demo", "other"])  # type: ignore[arg-type]
    assert auth.user("Bearer good") == "alice"
    assert auth.user("Bearer bad") is None


def test_one_namespace_or_all() -> None:
    api = FakeApi({"demo"})
    assert TokenReviewAuth(api, "demo").user("Bearer good") == "alice"  # type: ignore[arg-type]
    api = FakeApi({None})
    assert TokenReviewAuth(api, None).user("Bearer good") == "alice"  # type: ignore[arg-type]
    assert api.reviews == [None]  # cluster-wide: no namespace in the review


def test_namespace_is_given_once_per_namespace() -> None:
    args = _parser().parse_args(
        ["console", "--kubernetes", "--namespace", "demo", "--namespace", "other", "--anonymous"]
    )
    assert args.namespace == ["demo", "other"]
    assert _parser().parse_args(["console", "--kubernetes"]).namespace is None
