"""The Kubernetes API as a router pod uses it: a list and a watch of its ConfigMap
(router/config/sync.py) and a merge patch of its own Pod (router/pod/status.py); and as the
network console (router_operator/console/kubesource.py) uses it, in the same images: lists of
Routers and their pods, and a pod's log, which the API serves as plain text.

On the standard library, not the kubernetes package: importing that client (every model of
every API group) cost a router pod 55 MiB on top of its 33, and put 40 MB of packages into the
router image, for three kinds of request.

Where the API server is and who the router is there (`connect`): in a pod, its service account
(``KUBERNETES_SERVICE_HOST`` and ``_PORT``, the cluster's CA, and the token, read again for
every request, since the kubelet rotates it); elsewhere (a router run by hand, the tests), the
current context of ``KUBECONFIG`` (default ``~/.kube/config``): its server, its CA (a file or
data, or insecure-skip-tls-verify) and a token, token file or client certificate. Exec plugins
and auth providers need the kubernetes client's machinery and are refused with a one-line
reason: a router outside a cluster has a token or a certificate to use instead.
"""

from __future__ import annotations

import base64
import http.client
import json
import os
import ssl
import tempfile
import urllib.parse
from collections.abc import Iterator, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

SERVICE_ACCOUNT = Path("/var/run/secrets/kubernetes.io/serviceaccount")


class KubeConfigError(Exception):
    """Where the API server is, or who we are there, cannot be found out."""


class KubeApiError(Exception):
    """A request the API server refused (``status`` its HTTP status, 0 for none at all)."""

    def __init__(self, status: int, reason: str, message: str) -> None:
        super().__init__(f"{status} {reason}: {message}" if status else f"{reason}: {message}")
        self.status = status
        self.reason = reason


@dataclass(frozen=True)
class Cluster:
    """An API server and how to talk to it."""

    server: str
    """https://host:port (or http:// for an emulator), perhaps with a path prefix."""
    context: ssl.SSLContext | None = None
    token: str | None = None
    token_file: Path | None = None
    """Read for every request: a rotated token is used as soon as it is written."""

    def authorization(self) -> str | None:
        token = self.token
        if self.token_file is not None:
            token = self.token_file.read_text(encoding="utf-8").strip()
        return f"Bearer {token}" if token else None

    def _connection(self, timeout: float) -> tuple[http.client.HTTPConnection, str]:
        """A new connection and the path prefix of the server."""
        url = urllib.parse.urlsplit(self.server)
        host = url.hostname or ""
        if url.scheme == "https":
            connection: http.client.HTTPConnection = http.client.HTTPSConnection(
                host, url.port or 443, timeout=timeout, context=self.context
            )
        elif url.scheme == "http":
            connection = http.client.HTTPConnection(host, url.port or 80, timeout=timeout)
        else:
            raise KubeConfigError(f"server {self.server!r}: not an http(s) URL")
        return connection, url.path.rstrip("/")

    def _send(
        self,
        method: str,
        path: str,
        query: Mapping[str, str],
        body: Any,
        content_type: str | None,
        timeout: float,
        accept: str = "application/json",
    ) -> tuple[http.client.HTTPConnection, http.client.HTTPResponse]:
        connection, prefix = self._connection(timeout)
        headers = {"Accept": accept}
        authorization = self.authorization()
        if authorization:
            headers["Authorization"] = authorization
        data = None
        if body is not None:
            data = json.dumps(body).encode()
            headers["Content-Type"] = content_type or "application/json"
        target = prefix + path + (f"?{urllib.parse.urlencode(query)}" if query else "")
        try:
            connection.request(method, target, body=data, headers=headers)
            response = connection.getresponse()
        except (OSError, http.client.HTTPException) as err:
            connection.close()
            raise KubeApiError(0, type(err).__name__, str(err)) from err
        if not 200 <= response.status <= 299:
            text = response.read().decode("utf-8", "replace")
            connection.close()
            raise KubeApiError(response.status, response.reason, status_message(text))
        return connection, response

    def request(
        self,
        method: str,
        path: str,
        *,
        query: Mapping[str, str] | None = None,
        body: Any = None,
        content_type: str | None = None,
        timeout: float = 30.0,
    ) -> Any:
        """One request; its JSON answer (None for an empty one)."""
        connection, response = self._send(method, path, query or {}, body, content_type, timeout)
        try:
            text = response.read()
        except (OSError, http.client.HTTPException) as err:
            raise KubeApiError(0, type(err).__name__, str(err)) from err
        finally:
            connection.close()
        return json.loads(text) if text else None

    def request_text(
        self, path: str, *, query: Mapping[str, str] | None = None, timeout: float = 30.0
    ) -> str:
        """A GET whose answer is text, not JSON: a pod's log (``.../pods/<name>/log``). Bytes
        that are not UTF-8 (a program's stray output) are replaced, not an error."""
        connection, response = self._send(
            "GET", path, query or {}, None, None, timeout, accept="text/plain, */*"
        )
        try:
            data = response.read()
        except (OSError, http.client.HTTPException) as err:
            raise KubeApiError(0, type(err).__name__, str(err)) from err
        finally:
            connection.close()
        return data.decode("utf-8", "replace")

    def watch(
        self, path: str, *, query: Mapping[str, str], timeout: float
    ) -> Iterator[dict[str, Any]]:
        """A watch: its events as they come, until the server ends the stream (``timeout``:
        the longest silence before giving up on the connection)."""
        connection, response = self._send(
            "GET", path, {**query, "watch": "true"}, None, None, timeout
        )
        try:
            while line := response.readline():
                if line.strip():
                    yield json.loads(line)
        except (OSError, http.client.HTTPException) as err:
            raise KubeApiError(0, type(err).__name__, str(err)) from err
        finally:
            connection.close()


def status_message(text: str) -> str:
    """The message of a metav1.Status answer, else the text (shortened)."""
    try:
        message = json.loads(text).get("message")
    except (ValueError, AttributeError):
        message = None
    return str(message) if message else text[:500]


def connect(env: Mapping[str, str] = os.environ) -> Cluster:
    """In a pod, its service account; elsewhere, the current kubeconfig context."""
    host = env.get("KUBERNETES_SERVICE_HOST")
    if host:
        return in_cluster(host, env.get("KUBERNETES_SERVICE_PORT", "443"), SERVICE_ACCOUNT)
    path = env.get("KUBECONFIG", "").split(os.pathsep)[0] or str(Path.home() / ".kube/config")
    return from_kubeconfig(Path(path))


def in_cluster(host: str, port: str, account: Path) -> Cluster:
    if ":" in host:  # an IPv6 address
        host = f"[{host}]"
    try:
        context = ssl.create_default_context(cafile=str(account / "ca.crt"))
    except OSError as err:
        raise KubeConfigError(f"the service account's CA: {err}") from err
    return Cluster(f"https://{host}:{port}", context, token_file=account / "token")


def from_kubeconfig(path: Path) -> Cluster:
    """The current context of a kubeconfig file."""
    import yaml  # not in a pod's router, which never reads one

    try:
        config = yaml.safe_load(path.read_text(encoding="utf-8")) or {}
    except (OSError, yaml.YAMLError) as err:
        raise KubeConfigError(f"kubeconfig {path}: {err}") from err
    name = config.get("current-context")
    context = _named(config, "contexts", name, path).get("context") or {}
    cluster = _named(config, "clusters", context.get("cluster"), path).get("cluster") or {}
    user = _named(config, "users", context.get("user"), path).get("user") or {}
    server = cluster.get("server")
    if not server:
        raise KubeConfigError(f"kubeconfig {path}: context {name!r} names no server")
    for unsupported in ("exec", "auth-provider"):
        if unsupported in user:
            raise KubeConfigError(
                f"kubeconfig {path}: user {context.get('user')!r} logs in with {unsupported},"
                " which a router does not run: give it a token or a client certificate"
            )
    ssl_context = None
    if server.startswith("https:"):
        try:
            ssl_context = _ssl_context(cluster, user, path.parent)
        except (OSError, ValueError, KeyError) as err:  # ssl.SSLError is an OSError
            raise KubeConfigError(f"kubeconfig {path}: TLS settings: {err}") from err
    token_file = user.get("tokenFile")
    return Cluster(
        server,
        ssl_context,
        token=user.get("token"),
        token_file=None if token_file is None else path.parent / token_file,
    )


def _named(config: Mapping[str, Any], section: str, name: Any, path: Path) -> dict[str, Any]:
    for entry in config.get(section) or []:
        if entry.get("name") == name:
            return dict(entry)
    raise KubeConfigError(f"kubeconfig {path}: no {section[:-1]} named {name!r}")


def _ssl_context(cluster: Mapping[str, Any], user: Mapping[str, Any], base: Path) -> ssl.SSLContext:
    if cluster.get("insecure-skip-tls-verify"):
        context = ssl.create_default_context()
        context.check_hostname = False
        context.verify_mode = ssl.CERT_NONE
    elif "certificate-authority-data" in cluster:
        pem = base64.b64decode(cluster["certificate-authority-data"]).decode()
        context = ssl.create_default_context(cadata=pem)
    elif "certificate-authority" in cluster:
        context = ssl.create_default_context(cafile=str(base / cluster["certificate-authority"]))
    else:
        context = ssl.create_default_context()
    if "client-certificate-data" in user or "client-certificate" in user:
        cert = _pem(user, "client-certificate", base)
        key = _pem(user, "client-key", base)
        # ssl loads a certificate and key from files only: both go, together, into one
        # private file that is removed once loaded.
        with tempfile.NamedTemporaryFile("w", suffix=".pem") as pair:
            pair.write(cert + "\n" + key)
            pair.flush()
            context.load_cert_chain(pair.name)
    return context


def _pem(user: Mapping[str, Any], field: str, base: Path) -> str:
    if f"{field}-data" in user:
        return base64.b64decode(user[f"{field}-data"]).decode()
    return (base / user[field]).read_text(encoding="utf-8")
