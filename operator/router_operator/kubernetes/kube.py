"""The client of the Kubernetes API (kubernetes/api.py's
:class:`~router_operator.kubernetes.api.Api`): apply, get, patch status or scale, delete; on any
kind, with plain dicts.

Why not the generated client's typed APIs: the renderer already produces plain manifests for
every kind, and status goes to a custom resource's subresource; one small generic layer serves
them all, and its ``Api`` protocol lets the reconciler be tested against a fake or the kmock
emulator alike. The kubernetes package still does what is hard to get right: finding the
cluster and who we are (kubeconfig contexts, exec plugins, in-cluster tokens, which rotate and
which its configuration's hook reads again). The requests go through urllib3 (which it uses),
not its ApiClient, whose request methods changed incompatibly between releases (the operator
image once failed on every request: ``param_serialize`` exists from kubernetes 37 only).

Children are written with server-side apply (field manager ``routernet-operator``, forced): the
operator owns every field it renders, a field it stops rendering is removed, and fields set by
others (an admission webhook's, a Service's clusterIP) are kept. The API server creates the object
when it is absent; an emulator that cannot (kmock answers 404) gets a plain create instead.

The client is synchronous: the reconciler runs it in a worker thread (``asyncio.to_thread``),
so kopf's event loop never blocks on the network.
"""

from __future__ import annotations

import json
import os
import urllib.parse
from collections.abc import Mapping
from typing import Any

import kopf
import kubernetes.client
import kubernetes.config
import urllib3

from router.pod.kubeapi import status_message
from router_operator.kubernetes.api import ApiError, resource_path

FIELD_MANAGER = "routernet-operator"
DEFAULT_TIMEOUT_SECONDS = 30.0


def load_configuration(context: str | None = None) -> kubernetes.client.Configuration:
    """In a pod: its service account; elsewhere: the current kubeconfig context.

    ``KUBECONFIG`` is read now rather than when the kubernetes package was imported (its
    default), so that a laptop shell, a test and a pod all mean the same thing by it.
    """
    configuration = kubernetes.client.Configuration()
    if os.environ.get("KUBERNETES_SERVICE_HOST") and context is None:
        kubernetes.config.load_incluster_config(client_configuration=configuration)
        return configuration
    kubernetes.config.load_kube_config(
        config_file=os.environ.get("KUBECONFIG") or None,
        context=context,
        client_configuration=configuration,
        persist_config=False,
    )
    return configuration


def bearer(configuration: kubernetes.client.Configuration) -> str | None:
    """The Authorization header's token, as the configuration has it now: reading it runs the
    configuration's refresh hook (a rotated service account token, an exec plugin's new one).
    Releases keep it under "authorization" (up to 36) or "BearerToken" (37)."""
    header: str | None = configuration.get_api_key_with_prefix(
        "BearerToken"
    ) or configuration.get_api_key_with_prefix("authorization")
    return header


def connection_info(
    configuration: kubernetes.client.Configuration, *, trust_env: bool = False
) -> kopf.ConnectionInfo:
    """kopf's credentials from the same configuration the reconciler's client uses: one source
    of truth for where the cluster is and who the operator is."""
    header = bearer(configuration)
    scheme, token = None, None
    if header:
        parts = header.split(" ", 1)
        scheme, token = (parts[0], parts[1]) if len(parts) == 2 else (None, parts[0])
    return kopf.ConnectionInfo(
        server=configuration.host,
        ca_path=configuration.ssl_ca_cert,
        insecure=not configuration.verify_ssl,
        username=configuration.username or None,
        password=configuration.password or None,
        scheme=scheme,
        token=token,
        certificate_path=configuration.cert_file,
        private_key_path=configuration.key_file,
        trust_env=trust_env,
    )


class KubeClient:
    """:class:`Api` over urllib3, with the configuration's server, certificates and
    credentials. Safe to share between threads."""

    def __init__(
        self,
        configuration: kubernetes.client.Configuration,
        *,
        field_manager: str = FIELD_MANAGER,
        timeout: float = DEFAULT_TIMEOUT_SECONDS,
    ) -> None:
        self._configuration = configuration
        self._pool = _pool(configuration)
        self._field_manager = field_manager
        self._timeout = timeout

    @classmethod
    def for_url(cls, url: str, **kwargs: Any) -> KubeClient:
        """A client for an unauthenticated API server (kmock, ``kubectl proxy``)."""
        configuration = kubernetes.client.Configuration(host=url.rstrip("/"))
        return cls(configuration, **kwargs)

    def close(self) -> None:
        self._pool.clear()

    def apply(self, obj: Mapping[str, Any]) -> dict[str, Any]:
        meta = obj["metadata"]
        path = resource_path(obj["apiVersion"], obj["kind"], meta.get("namespace"), meta["name"])
        try:
            result = self._request(
                "PATCH",
                path,
                query=[("fieldManager", self._field_manager), ("force", "true")],
                body=dict(obj),
                content_type="application/apply-patch+yaml",
            )
        except ApiError as err:
            if not err.not_found:
                raise
            collection = resource_path(obj["apiVersion"], obj["kind"], meta.get("namespace"))
            result = self._request(
                "POST",
                collection,
                query=[("fieldManager", self._field_manager)],
                body=dict(obj),
                content_type="application/json",
            )
        return result or {}

    def get(self, api_version: str, kind: str, namespace: str, name: str) -> dict[str, Any] | None:
        try:
            return self._request("GET", resource_path(api_version, kind, namespace, name))
        except ApiError as err:
            if err.not_found:
                return None
            raise

    def patch_status(
        self, api_version: str, kind: str, namespace: str, name: str, status: Mapping[str, Any]
    ) -> dict[str, Any]:
        path = resource_path(api_version, kind, namespace, name, "status")
        result = self._request(
            "PATCH",
            path,
            body={"status": dict(status)},
            content_type="application/merge-patch+json",
        )
        return result or {}

    def patch_scale(
        self, api_version: str, kind: str, namespace: str, name: str, replicas: int
    ) -> dict[str, Any]:
        path = resource_path(api_version, kind, namespace, name, "scale")
        result = self._request(
            "PATCH",
            path,
            body={"spec": {"replicas": replicas}},
            content_type="application/merge-patch+json",
        )
        return result or {}

    def delete(
        self, api_version: str, kind: str, namespace: str, name: str, *, uid: str | None = None
    ) -> bool:
        # Background propagation: what the object owns (KEDA's HPA of a ScaledObject) goes by
        # garbage collection. The uid precondition keeps an object re-created under the same
        # name since it was read (by someone else) from being deleted in its place.
        options: dict[str, Any] = {"propagationPolicy": "Background"}
        if uid:
            options["preconditions"] = {"uid": uid}
        try:
            self._request(
                "DELETE",
                resource_path(api_version, kind, namespace, name),
                body=options,
                content_type="application/json",
            )
        except ApiError as err:
            if err.not_found:
                return False
            raise
        return True

    def _request(
        self,
        method: str,
        path: str,
        *,
        query: list[tuple[str, str]] | None = None,
        body: Any = None,
        content_type: str | None = None,
    ) -> dict[str, Any] | None:
        headers = {"Accept": "application/json"}
        if content_type:
            headers["Content-Type"] = content_type
        configuration = self._configuration
        token = bearer(configuration)
        if token:
            headers["Authorization"] = token
        elif configuration.username:
            headers["Authorization"] = configuration.get_basic_auth_token()
        url = configuration.host.rstrip("/") + path
        if query:
            url += "?" + urllib.parse.urlencode(query)
        try:
            response = self._pool.request(
                method,
                url,
                body=None if body is None else json.dumps(body).encode(),
                headers=headers,
                timeout=urllib3.Timeout(total=self._timeout),
                retries=False,
            )
        except (urllib3.exceptions.HTTPError, OSError) as err:
            raise ApiError(0, type(err).__name__, str(err)) from err
        text = response.data.decode("utf-8", "replace") if response.data else ""
        if not 200 <= response.status <= 299:
            raise ApiError(response.status, str(response.reason or ""), status_message(text))
        return json.loads(text) if text else None


def _pool(configuration: kubernetes.client.Configuration) -> urllib3.PoolManager:
    """Connections to the API server as the configuration says: its CA (or none checked, when
    it says so), a client certificate, a proxy."""
    options: dict[str, Any] = {
        "num_pools": 2,
        "maxsize": 8,  # the reconciler's thread and the autoscaler's at once, and some to spare
        "cert_reqs": "CERT_REQUIRED" if configuration.verify_ssl else "CERT_NONE",
        "ca_certs": configuration.ssl_ca_cert,
        "cert_file": configuration.cert_file,
        "key_file": configuration.key_file,
    }
    if configuration.assert_hostname is not None:
        options["assert_hostname"] = configuration.assert_hostname
    server_name = getattr(configuration, "tls_server_name", None)
    if server_name:
        options["server_hostname"] = server_name
    if configuration.proxy:
        return urllib3.ProxyManager(
            configuration.proxy, proxy_headers=configuration.proxy_headers, **options
        )
    return urllib3.PoolManager(**options)
