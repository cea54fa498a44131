"""Who may read the console. Read-only as it is, it shows the network's addresses, clients
and logs, so it is never anonymous unless the user says so (``--anonymous``), except for a
console on loopback, which only this machine's users reach (``routernet console`` by default).

- ``BasicAuth``: user names and passwords from a file of ``user:password`` lines (the chart
  mounts a Secret's ``auth`` key there), compared in constant time.
- ``TokenReviewAuth``: a bearer token, checked with the API server's TokenReview; the user it
  names must then be allowed to ``list`` Routers in each namespace the console shows (a
  SubjectAccessReview each; everywhere when it shows all), so the console shows no more than
  ``kubectl get routers`` would. Answers are kept for a minute: a page polls every few seconds.
"""

from __future__ import annotations

import base64
import binascii
import hmac
import threading
import time
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any, Protocol

from router.pod.kubeapi import Cluster, KubeApiError
from router_operator.resources.models import GROUP

CACHE_SECONDS = 60.0


class AuthError(ValueError):
    """Bad auth configuration (a missing or malformed file); the text says why in one line."""


class Authenticator(Protocol):
    challenge: str
    """The WWW-Authenticate header of a 401."""
    pages_public: bool
    """Whether the pages (not the API) are served without credentials."""

    def user(self, authorization: str | None) -> str | None:
        """The user an Authorization header proves, or None."""
        ...


class Anonymous:
    challenge = ""
    pages_public = True

    def user(self, authorization: str | None) -> str | None:
        return "anonymous"


class BasicAuth:
    challenge = 'Basic realm="routernet console", charset="UTF-8"'
    pages_public = False  # the browser asks for the password on the page itself

    def __init__(self, users: dict[str, str]) -> None:
        if not users:
            raise AuthError("no users for basic auth")
        self.users = users

    @classmethod
    def from_file(cls, path: Path) -> BasicAuth:
        try:
            text = path.read_text(encoding="utf-8")
        except OSError as err:
            raise AuthError(f"{path}: {err.strerror}") from None
        users = {}
        for number, line in enumerate(text.splitlines(), 1):
            if not line.strip() or line.startswith("#"):
                continue
            name, colon, password = line.partition(":")
            if not colon or not name or not password:
                raise AuthError(f"{path}:{number}: expected user:password")
            users[name] = password
        return cls(users)

    def user(self, authorization: str | None) -> str | None:
        scheme, _, encoded = (authorization or "").partition(" ")
        if scheme.lower() != "basic":
            return None
        try:
            name, _, password = base64.b64decode(encoded, validate=True).decode().partition(":")
        except (binascii.Error, UnicodeDecodeError):
            return None
        expected = self.users.get(name)
        # Compared even for an unknown user, so the time taken does not say which names exist.
        ok = hmac.compare_digest(password.encode(), (expected or "\0").encode())
        return name if ok and expected is not None else None


class TokenReviewAuth:
    challenge = 'Bearer realm="routernet console"'
    pages_public = True  # a browser has no token to send for them: the page asks for one

    def __init__(
        self,
        cluster: Cluster,
        namespace: str | Sequence[str] | None,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self.cluster = cluster
        if isinstance(namespace, str):
            namespace = [namespace]
        self.namespaces: tuple[str | None, ...] = tuple(namespace or ()) or (None,)
        """Where the user must be allowed to list Routers; None: in every namespace."""
        self.clock = clock
        self._cache: dict[str, tuple[float, str | None]] = {}
        self._lock = threading.Lock()

    def user(self, authorization: str | None) -> str | None:
        scheme, _, token = (authorization or "").partition(" ")
        if scheme.lower() != "bearer" or not token.strip():
            return None
        token = token.strip()
        now = self.clock()
        with self._lock:
            cached = self._cache.get(token)
            if cached is not None and now - cached[0] < CACHE_SECONDS:
                return cached[1]
        try:
            user = self._review(token)
        except KubeApiError:
            return None  # not kept: the API server may answer next time
        with self._lock:
            self._cache = {t: v for t, v in self._cache.items() if now - v[0] < CACHE_SECONDS}
            self._cache[token] = (now, user)
        return user

    def _review(self, token: str) -> str | None:
        review = self.cluster.request(
            "POST",
            "/apis/authentication.k8s.io/v1/tokenreviews",
            body={
                "apiVersion": "authentication.k8s.io/v1",
                "kind": "TokenReview",
                "spec": {"token": token},
            },
        )
        status = (review or {}).get("status") or {}
        if not status.get("authenticated"):
            return None
        info = status.get("user") or {}
        name = info.get("username")
        if not name:
            return None
        for namespace in self.namespaces:
            if not self._may_list_routers(info, namespace):
                return None
        return str(name)

    def _may_list_routers(self, info: dict[str, Any], namespace: str | None) -> bool:
        attributes = {"verb": "list", "group": GROUP, "resource": "routers"}
        if namespace:
            attributes["namespace"] = namespace
        access = self.cluster.request(
            "POST",
            "/apis/authorization.k8s.io/v1/subjectaccessreviews",
            body={
                "apiVersion": "authorization.k8s.io/v1",
                "kind": "SubjectAccessReview",
                "spec": {
                    "user": info["username"],
                    "groups": info.get("groups") or [],
                    "uid": info.get("uid") or "",
                    "extra": info.get("extra") or {},
                    "resourceAttributes": attributes,
                },
            },
        )
        return bool(((access or {}).get("status") or {}).get("allowed"))
