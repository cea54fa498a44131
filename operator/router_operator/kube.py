"""The client of the Kubernetes API (api.py's :class:`~router_operator.api.Api`): apply, get,
patch status or scale, delete; on any kind, with plain dicts.

Why not the generated client's typed APIs: the renderer already produces plain manifests for six
kinds (more to come, e.g. a Role for config-sync), and status goes to a custom resource's
subresource; one small generic layer over ``kubernetes.client.ApiClient`` (which keeps doing the
authentication: kubeconfig, exec plugins, in-cluster token refresh) serves them all, and its
``Api`` protocol (api.py) lets the reconciler be tested against a fake or the kmock emulator alike.

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
from collections.abc import Mapping
from typing import Any

import kopf
import kubernetes.client
import kubernetes.config
import urllib3
from kubernetes.client.exceptions import ApiException

from router_operator.api import ApiError, resource_path

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


def connection_info(
    configuration: kubernetes.client.Configuration, *, trust_env: bool = False
) -> kopf.ConnectionInfo:
    """kopf's credentials from the same configuration the reconciler's client uses: one source
    of truth for where the cluster is and who the operator is."""
    header = configuration.get_api_key_with_prefix(
        "BearerToken"
    ) or configuration.get_api_key_with_prefix("authorization")
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
    """:class:`Api` over ``kubernetes.client.ApiClient``: its authentication and connection
    pool, our paths and content types. Safe to share between threads."""

    def __init__(
        self,
        configuration: kubernetes.client.Configuration,
        *,
        field_manager: str = FIELD_MANAGER,
        timeout: float = DEFAULT_TIMEOUT_SECONDS,
    ) -> None:
        self._client = kubernetes.client.ApiClient(configuration)
        self._field_manager = field_manager
        self._timeout = timeout

    @classmethod
    def for_url(cls, url: str, **kwargs: Any) -> KubeClient:
        """A client for an unauthenticated API server (kmock, ``kubectl proxy``)."""
        configuration = kubernetes.client.Configuration(host=url.rstrip("/"))
        return cls(configuration, **kwargs)

    def close(self) -> None:
        self._client.close()

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
        request = self._client.param_serialize(
            method=method,
            resource_path=path,
            query_params=query or [],
            header_params=headers,
            body=body,
            auth_settings=["BearerToken"],
        )
        try:
            response = self._client.call_api(*request, _request_timeout=self._timeout)
            data = response.read()
        except ApiException as err:  # raised by the REST layer for TLS and similar failures
            reason, message = str(err.reason or "Error"), str(err.body or err)
            raise ApiError(err.status or 0, reason, message) from err
        except (urllib3.exceptions.HTTPError, OSError) as err:
            raise ApiError(0, type(err).__name__, str(err)) from err
        text = data.decode("utf-8", "replace") if data else ""
        if not 200 <= response.status <= 299:
            raise ApiError(response.status, str(response.reason or ""), _status_message(text))
        return json.loads(text) if text else None


def _status_message(text: str) -> str:
    """The message of a metav1.Status answer, else the raw text (shortened)."""
    try:
        message = json.loads(text).get("message")
    except (ValueError, AttributeError):
        message = None
    return str(message) if message else text[:500]
