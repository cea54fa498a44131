"""router/pod/kubeapi.py, a router pod's Kubernetes API client, against a small HTTPS server on
loopback that answers as the API server does (TLS with its own CA, bearer tokens, JSON Status
errors, a watch as a stream of JSON lines), and against kubeconfig files."""

from __future__ import annotations

import base64
import json
import ssl
import threading
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

import pytest
from test_tls import Pki, build_pki

from router.config.sync import api_functions
from router.pod import kubeapi
from router.pod.status import MERGE_PATCH, api_patch_function


class FakeApiServer:
    """Records each request (method, path with query, headers, body) and answers from
    ``answers``: path -> (status, body as JSON, or a list of watch events)."""

    def __init__(self, pki: Pki | None) -> None:
        self.requests: list[dict[str, Any]] = []
        self.answers: dict[str, tuple[int, Any]] = {}
        server = self

        class Handler(BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"

            def handle_one(self) -> None:
                length = int(self.headers.get("Content-Length") or 0)
                body = self.rfile.read(length) if length else b""
                server.requests.append(
                    {
                        "method": self.command,
                        "path": self.path,
                        "headers": dict(self.headers),
                        "body": json.loads(body) if body else None,
                    }
                )
                status, answer = server.answers.get(self.path.split("?")[0], (404, None))
                if isinstance(answer, bytes):  # a pod's log: plain text
                    self.send_response(status)
                    self.send_header("Content-Type", "text/plain")
                    self.send_header("Content-Length", str(len(answer)))
                    self.end_headers()
                    self.wfile.write(answer)
                    return
                if isinstance(answer, list):  # a watch: chunked JSON lines
                    self.send_response(status)
                    self.send_header("Transfer-Encoding", "chunked")
                    self.end_headers()
                    for event in answer:
                        line = json.dumps(event).encode() + b"\n"
                        self.wfile.write(b"%x\r\n%s\r\n" % (len(line), line))
                    self.wfile.write(b"0\r\n\r\n")
                    return
                data = json.dumps(answer if answer is not None else status_body(status)).encode()
                self.send_response(status)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(data)))
                self.end_headers()
                self.wfile.write(data)

            do_GET = do_PATCH = handle_one

            def log_message(self, format: str, *args: Any) -> None:
                pass

        self.httpd = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.httpd.daemon_threads = True
        scheme = "http"
        if pki is not None:
            context = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
            context.load_cert_chain(pki.server_cert, pki.server_key)
            context.load_verify_locations(pki.ca)
            context.verify_mode = ssl.CERT_OPTIONAL  # a client certificate when one comes
            self.httpd.socket = context.wrap_socket(self.httpd.socket, server_side=True)
            scheme = "https"
        self.url = f"{scheme}://127.0.0.1:{self.httpd.server_address[1]}"
        self.thread = threading.Thread(target=self.httpd.serve_forever, daemon=True)

    def __enter__(self) -> FakeApiServer:
        self.thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.httpd.shutdown()
        self.httpd.server_close()


def status_body(code: int) -> dict[str, Any]:
    return {"kind": "Status", "code": code, "message": f"the message of a {code}"}


@pytest.fixture(scope="module")
def pki(tmp_path_factory: pytest.TempPathFactory) -> Pki:
    return build_pki(tmp_path_factory.mktemp("pki"))


@pytest.fixture
def api(pki: Pki) -> Iterator[FakeApiServer]:
    with FakeApiServer(pki) as server:
        yield server


def service_account(directory: Path, pki: Pki, token: str) -> Path:
    directory.mkdir(exist_ok=True)
    (directory / "ca.crt").write_bytes(pki.ca.read_bytes())
    (directory / "token").write_text(token + "\n")
    return directory


def test_in_a_pod_the_service_account_speaks_and_its_token_is_read_again(
    api: FakeApiServer, pki: Pki, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    account = service_account(tmp_path / "sa", pki, "first")
    monkeypatch.setattr(kubeapi, "SERVICE_ACCOUNT", account)
    port = api.url.rsplit(":", 1)[1]
    cluster = kubeapi.connect(
        {"KUBERNETES_SERVICE_HOST": "127.0.0.1", "KUBERNETES_SERVICE_PORT": port}
    )
    pods = "/api/v1/namespaces/ns/pods/r-0"
    api.answers[pods] = (200, {"kind": "Pod"})
    patch = api_patch_function(cluster, "ns", "r-0")
    patch({"metadata": {"annotations": {"a": "1"}}})
    (account / "token").write_text("rotated\n")  # the kubelet renews it
    patch({"metadata": {"annotations": {"a": "2"}}})
    first, second = api.requests
    assert (first["method"], first["path"]) == ("PATCH", pods)
    assert first["headers"]["Content-Type"] == MERGE_PATCH == "application/merge-patch+json"
    assert first["body"] == {"metadata": {"annotations": {"a": "1"}}}
    assert first["headers"]["Authorization"] == "Bearer first"
    assert second["headers"]["Authorization"] == "Bearer rotated"


def test_in_cluster_reads_the_service_account_directory(pki: Pki, tmp_path: Path) -> None:
    account = service_account(tmp_path / "sa", pki, "t")
    cluster = kubeapi.in_cluster("fd00::1", "443", account)
    assert cluster.server == "https://[fd00::1]:443"
    assert cluster.authorization() == "Bearer t"
    with pytest.raises(kubeapi.KubeConfigError, match="the service account's CA"):
        kubeapi.in_cluster("10.0.0.1", "443", tmp_path / "nowhere")


def test_a_server_certificate_from_another_ca_is_refused(api: FakeApiServer, pki: Pki) -> None:
    cluster = kubeapi.Cluster(api.url, ssl.create_default_context(cafile=str(pki.other_ca)))
    with pytest.raises(kubeapi.KubeApiError) as refused:
        cluster.request("GET", "/api/v1/namespaces/ns/configmaps")
    assert refused.value.status == 0
    assert "CERTIFICATE_VERIFY_FAILED" in str(refused.value)
    assert api.requests == []


def test_list_and_watch_a_configmap(api: FakeApiServer, pki: Pki) -> None:
    path = "/api/v1/namespaces/ns/configmaps"
    cm = {"metadata": {"name": "routers", "resourceVersion": "7"}, "data": {"k": "v"}}
    api.answers[path] = (
        200,
        {"metadata": {"resourceVersion": "7"}, "items": [cm]},
    )
    cluster = kubeapi.Cluster(api.url, ssl.create_default_context(cafile=str(pki.ca)), "t")
    list_fn, watch_fn = api_functions(cluster, "ns", "routers")
    assert list_fn() == ("7", cm)
    events = [
        {"type": "MODIFIED", "object": {**cm, "data": {"k": "w"}}},
        {"type": "BOOKMARK", "object": {"metadata": {"resourceVersion": "9"}}},
    ]
    api.answers[path] = (200, events)
    assert list(watch_fn("7")) == events
    listed, watched = api.requests
    # The Role's resourceNames authorize a list or watch only with this field selector.
    assert listed["path"] == f"{path}?fieldSelector=metadata.name%3Drouters"
    assert watched["path"].startswith(f"{path}?fieldSelector=metadata.name%3Drouters&")
    query = dict(part.split("=") for part in watched["path"].split("?")[1].split("&"))
    assert query["watch"] == "true" and query["resourceVersion"] == "7"
    assert query["allowWatchBookmarks"] == "true" and int(query["timeoutSeconds"]) > 0


def test_a_refusal_says_status_reason_and_message(api: FakeApiServer, pki: Pki) -> None:
    cluster = kubeapi.Cluster(api.url, ssl.create_default_context(cafile=str(pki.ca)), "t")
    api.answers["/api/v1/namespaces/ns/configmaps"] = (410, None)
    with pytest.raises(kubeapi.KubeApiError) as gone:
        list(cluster.watch("/api/v1/namespaces/ns/configmaps", query={}, timeout=5))
    assert gone.value.status == 410
    api.answers["/api/v1/namespaces/ns/pods/r-0"] = (403, None)
    with pytest.raises(kubeapi.KubeApiError) as forbidden:
        cluster.request("PATCH", "/api/v1/namespaces/ns/pods/r-0", body={})
    assert str(forbidden.value) == "403 Forbidden: the message of a 403"


def test_a_pods_log_comes_as_text(api: FakeApiServer, pki: Pki) -> None:
    """The log API answers text/plain (the console shows a router's last lines)."""
    cluster = kubeapi.Cluster(api.url, ssl.create_default_context(cafile=str(pki.ca)), "t")
    path = "/api/v1/namespaces/ns/pods/r-0/log"
    api.answers[path] = (200, b'router.ready\n{"not": "json"} caf\xc3\xa9 \xff\n')
    text = cluster.request_text(path, query={"tailLines": "2", "container": "router"})
    assert text == 'router.ready\n{"not": "json"} caf\u00e9 \ufffd\n'
    [asked] = api.requests
    assert asked["method"] == "GET"
    assert asked["path"] == f"{path}?tailLines=2&container=router"
    assert asked["headers"]["Accept"].startswith("text/plain")
    assert asked["headers"]["Authorization"] == "Bearer t"
    api.answers[path] = (400, None)  # the container is waiting to start
    with pytest.raises(kubeapi.KubeApiError, match="400 Bad Request: the message of a 400"):
        cluster.request_text(path)


def kubeconfig(path: Path, cluster: dict[str, Any], user: dict[str, Any]) -> Path:
    path.write_text(
        json.dumps(
            {
                "current-context": "c",
                "contexts": [{"name": "c", "context": {"cluster": "k", "user": "u"}}],
                "clusters": [{"name": "k", "cluster": cluster}],
                "users": [{"name": "u", "user": user}],
            }
        )
    )
    return path


def b64(path: Path) -> str:
    return base64.b64encode(path.read_bytes()).decode()


def test_kubeconfig_certificates_inline_or_in_files_and_tokens(
    api: FakeApiServer, pki: Pki, tmp_path: Path
) -> None:
    path = "/api/v1/namespaces/ns/configmaps"
    api.answers[path] = (200, {"items": []})
    inline = kubeconfig(
        tmp_path / "inline",
        {"server": api.url, "certificate-authority-data": b64(pki.ca)},
        {"client-certificate-data": b64(pki.client_cert), "client-key-data": b64(pki.client_key)},
    )
    kubeapi.connect({"KUBECONFIG": str(inline)}).request("GET", path)
    (tmp_path / "token").write_text("from-a-file\n")
    files = kubeconfig(
        tmp_path / "files",
        {"server": api.url, "certificate-authority": str(pki.ca)},
        {"tokenFile": "token"},  # relative to the kubeconfig's directory
    )
    kubeapi.connect({"KUBECONFIG": f"{files}:{inline}"}).request("GET", path)
    insecure = kubeconfig(
        tmp_path / "insecure", {"server": api.url, "insecure-skip-tls-verify": True}, {}
    )
    kubeapi.connect({"KUBECONFIG": str(insecure)}).request("GET", path)
    assert "Authorization" not in api.requests[0]["headers"]
    assert api.requests[1]["headers"]["Authorization"] == "Bearer from-a-file"
    assert len(api.requests) == 3


@pytest.mark.parametrize(
    ("config", "error"),
    [
        ({"cluster": {}, "user": {}}, "names no server"),
        (
            {"cluster": {"server": "https://k"}, "user": {"exec": {"command": "aws"}}},
            "logs in with exec, which a router does not run",
        ),
        (
            {
                "cluster": {"server": "https://k", "certificate-authority": "missing.pem"},
                "user": {},
            },
            "TLS settings",
        ),
    ],
)
def test_kubeconfig_problems_are_one_line(
    tmp_path: Path, config: dict[str, Any], error: str
) -> None:
    path = kubeconfig(tmp_path / "config", config["cluster"], config["user"])
    with pytest.raises(kubeapi.KubeConfigError, match=error):
        kubeapi.from_kubeconfig(path)


def test_a_kubeconfig_missing_or_without_its_context(tmp_path: Path) -> None:
    with pytest.raises(kubeapi.KubeConfigError, match="No such file"):
        kubeapi.from_kubeconfig(tmp_path / "none")
    (tmp_path / "config").write_text("current-context: elsewhere\ncontexts: []\n")
    with pytest.raises(kubeapi.KubeConfigError, match="no context named 'elsewhere'"):
        kubeapi.from_kubeconfig(tmp_path / "config")
