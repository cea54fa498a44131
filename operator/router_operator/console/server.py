"""The console's HTTP side: the JSON API under ``/api/`` that the pages use and users can
script, the pages themselves (``static/``, all served from here: the browser fetches nothing
from elsewhere), and the last ``routernet analyze`` report under ``/analysis/``.

On the standard library's threading server: a read-only console for a handful of users needs
no framework, and so runs in any of our images. Every answer is built from the scraper's last
round, never by asking the routers on a request, so a page's load costs no router anything.

Read-only: anything but GET and HEAD is 405. ``/healthz`` answers without authentication (the
kubelet's probe); everything else asks the authenticator (auth.py) first, but for the pages
themselves under bearer tokens: a browser has no token to send for them, and they hold no data
(they ask the user for a token, then the API with it).
"""

from __future__ import annotations

import json
import mimetypes
import re
import time
import urllib.parse
from http import HTTPStatus
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

from router_operator.console.auth import Anonymous, Authenticator
from router_operator.console.flows import FlowsError, parse_minutes, summarize
from router_operator.console.scraper import Scraper
from router_operator.console.view import internal

STATIC = Path(__file__).parent / "static"
LOG_LINES = 40
API = (
    "/api/topology",
    "/api/routers/<id>",
    "/api/addresses",
    "/api/nodes",
    "/api/flows?minutes=N",
    "/api/health",
)


class NotFound(Exception):
    pass


class Console:
    """What the handlers answer from: the scraper's rounds, the source, the flows."""

    def __init__(self, scraper: Scraper, authenticator: Authenticator | None = None) -> None:
        self.scraper = scraper
        self.source = scraper.source
        self.auth: Authenticator = authenticator or Anonymous()

    def _latest(self) -> dict[str, Any]:
        current, _ = self.scraper.latest()
        if current is None:
            return {
                "at": None,
                "routers": [],
                "links": [],
                "clients": [],
                "containers": [],
                "addresses": [],
                "nodes": [],
                "linkRoutes": [],
                "networks": [],
            }
        return current

    def _head(self, current: dict[str, Any]) -> dict[str, Any]:
        return {"at": current["at"], "source": self.source.name, "interval": self.scraper.interval}

    def topology(self) -> dict[str, Any]:
        current = self._latest()
        return {
            **self._head(current),
            "networks": current["networks"],
            "routers": current["routers"],
            "links": current["links"],
            "clients": current["clients"],
            "containers": current["containers"],
            "analysis": "/analysis/report.html" if self.source.analysis() else None,
        }

    def router(self, router_id: str) -> dict[str, Any]:
        current = self._latest()
        entry = next((r for r in current["routers"] if r["id"] == router_id), None)
        scrape = self.scraper.scrape_of(router_id)
        if entry is None or scrape is None:
            raise NotFound(f"no router {router_id!r}")
        rows = scrape.rows or {}
        return {
            **self._head(current),
            "router": entry,
            "connections": rows.get("connection", []),
            "links": rows.get("router.link", []),
            "addresses": [
                a
                for a in current["addresses"]
                if any(r["router"] == router_id for r in a["routers"])
            ],
            "clients": [c for c in current["clients"] if c["router"] == router_id],
            "log": self.source.log_tail(scrape.target, LOG_LINES),
        }

    def addresses(self) -> dict[str, Any]:
        current = self._latest()
        return {
            **self._head(current),
            "addresses": current["addresses"],
            "linkRoutes": current["linkRoutes"],
        }

    def nodes(self) -> dict[str, Any]:
        """Queues and topics, each with its depth at every kept scrape (oldest first)."""
        current = self._latest()
        series: dict[tuple[str, str], list[list[float]]] = {}
        for v in self.scraper.views():
            for n in v["nodes"]:
                series.setdefault((n["name"], n["router"]), []).append([v["at"], n["depth"]])
        return {
            **self._head(current),
            "nodes": [
                {**n, "history": series.get((n["name"], n["router"]), [])} for n in current["nodes"]
            ],
        }

    def health(self) -> dict[str, Any]:
        current, problems = self.scraper.latest()
        current = current or self._latest()
        routers = current["routers"]
        return {
            **self._head(current),
            "routers": {
                "total": len(routers),
                "up": sum(1 for r in routers if r["state"] == "up"),
            },
            "addresses": sum(1 for a in current["addresses"] if not internal(a["address"])),
            "problems": problems,
        }

    def flow_summary(self, query: dict[str, list[str]]) -> dict[str, Any]:
        minutes = parse_minutes((query.get("minutes") or [None])[0])
        end = int(time.time() * 1000)
        start = end - minutes * 60_000
        answer = self.source.flows(start, end)
        if answer.totals is None:
            return {"available": False, "minutes": minutes, "reason": answer.reason}
        return {
            "available": True,
            "minutes": minutes,
            "unanswered": list(answer.unanswered),
            **summarize(answer.totals, start, end),
        }


class Handler(BaseHTTPRequestHandler):
    server: ConsoleServer
    server_version = "routernet-console"

    def log_message(self, format: str, *args: Any) -> None:
        pass  # a page polls every few seconds: no line per request

    def do_GET(self) -> None:
        self._answer(head=False)

    def do_HEAD(self) -> None:
        self._answer(head=True)

    def _refuse(self) -> None:
        self._send_json(HTTPStatus.METHOD_NOT_ALLOWED, {"error": "the console is read-only"})

    do_POST = do_PUT = do_PATCH = do_DELETE = _refuse

    def _answer(self, head: bool) -> None:
        url = urllib.parse.urlsplit(self.path)
        path = url.path
        if path == "/healthz":
            self._send(HTTPStatus.OK, b"ok\n", "text/plain; charset=utf-8", head)
            return
        console = self.server.console
        page = path in ("/", "/index.html") or path.startswith("/static/")
        public = page and console.auth.pages_public  # the pages hold no data of their own
        if not public and console.auth.user(self.headers.get("Authorization")) is None:
            self.send_response(HTTPStatus.UNAUTHORIZED)
            self.send_header("WWW-Authenticate", console.auth.challenge)
            self.send_header("Content-Length", "0")
            self.end_headers()
            return
        try:
            if path.startswith("/api/"):
                self._send_json(HTTPStatus.OK, self._api(path, url.query), head)
            elif path in ("/", "/index.html"):
                self._file(STATIC, "index.html", head)
            elif path.startswith("/static/"):
                self._file(STATIC, path.removeprefix("/static/"), head)
            elif path.startswith("/analysis/"):
                analysis = console.source.analysis()
                if analysis is None:
                    raise NotFound("no analysis: run `routernet analyze`")
                self._file(analysis, path.removeprefix("/analysis/"), head)
            else:
                raise NotFound(f"no page {path}")
        except NotFound as err:
            self._send_json(HTTPStatus.NOT_FOUND, {"error": str(err)}, head)
        except FlowsError as err:
            self._send_json(HTTPStatus.BAD_REQUEST, {"error": str(err)}, head)

    def _api(self, path: str, query: str) -> dict[str, Any]:
        console = self.server.console
        if path == "/api/topology":
            return console.topology()
        if path == "/api/addresses":
            return console.addresses()
        if path == "/api/nodes":
            return console.nodes()
        if path == "/api/health":
            return console.health()
        if path == "/api/flows":
            return console.flow_summary(urllib.parse.parse_qs(query))
        found = re.fullmatch(r"/api/routers/([^/]+)", path)
        if found:
            return console.router(urllib.parse.unquote(found.group(1)))
        raise NotFound(f"no API {path}; there are {', '.join(API)}")

    def _file(self, root: Path, name: str, head: bool) -> None:
        """A file under ``root``, never outside it (``..``, symlinks out)."""
        path = (root / urllib.parse.unquote(name)).resolve()
        if not path.is_relative_to(root.resolve()) or not path.is_file():
            raise NotFound(f"no file {name}")
        kind = mimetypes.guess_type(path.name)[0] or "application/octet-stream"
        if kind.startswith("text/") or kind in ("application/javascript", "image/svg+xml"):
            kind += "; charset=utf-8"
        self._send(HTTPStatus.OK, path.read_bytes(), kind, head)

    def _send_json(self, status: HTTPStatus, body: Any, head: bool = False) -> None:
        self._send(status, json.dumps(body).encode(), "application/json", head)

    def _send(self, status: HTTPStatus, data: bytes, kind: str, head: bool = False) -> None:
        self.send_response(status)
        self.send_header("Content-Type", kind)
        self.send_header("Content-Length", str(len(data)))
        self.send_header("Cache-Control", "no-store")
        self.send_header("X-Content-Type-Options", "nosniff")
        self.send_header(
            "Content-Security-Policy",
            "default-src 'self'; img-src 'self' data:; style-src 'self' 'unsafe-inline'",
        )
        self.end_headers()
        if not head:
            self.wfile.write(data)


class ConsoleServer(ThreadingHTTPServer):
    daemon_threads = True

    def __init__(self, address: tuple[str, int], console: Console) -> None:
        self.console = console
        super().__init__(address, Handler)

    @property
    def url(self) -> str:
        host, port = self.server_address[:2]
        shown = f"[{host}]" if ":" in str(host) else host
        return f"http://{shown}:{port}/"
