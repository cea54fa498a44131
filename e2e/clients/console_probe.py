"""The network console's JSON API as a user's script reads it, from a pod in the cluster (the
router image's Python; the standard library only):

    console_probe.py URL USER PASSWORD SECONDS ROUTER...

Asks URL/api/topology without credentials (the answer's status and challenge), then with them
every 2 s until every ROUTER is up and in a link, or SECONDS have passed; then URL/api/health;
then URL/api/flows?minutes=60 every 2 s until it has records from every collector it asked (the
collectors flush every 10 s), or SECONDS more have passed. Prints one JSON line,
{"unauthenticated": {...}, "topology": {...}, "health": {...}, "flows": {...}, "seconds": ...},
and exits 0 when every request was answered (the suite judges the answers).
"""

from __future__ import annotations

import base64
import json
import sys
import time
import urllib.error
import urllib.request
from typing import Any


def get(url: str, authorization: str | None) -> tuple[int, dict[str, str], Any]:
    request = urllib.request.Request(url)
    if authorization:
        request.add_header("Authorization", authorization)
    try:
        with urllib.request.urlopen(request, timeout=10) as response:
            return response.status, dict(response.headers), json.loads(response.read() or b"null")
    except urllib.error.HTTPError as err:
        return err.code, dict(err.headers), None


def settled(topology: dict[str, Any], routers: list[str]) -> bool:
    up = {r["id"] for r in topology.get("routers", []) if r.get("state") == "up"}
    linked = {end for lk in topology.get("links", []) for end in (lk["source"], lk["target"])}
    return set(routers) <= up & linked


def main(url: str, user: str, password: str, seconds: str, *routers: str) -> int:
    url = url.rstrip("/")
    started = time.monotonic()
    status, headers, _ = get(f"{url}/api/topology", None)
    unauthenticated = {"status": status, "challenge": headers.get("WWW-Authenticate", "")}
    basic = "Basic " + base64.b64encode(f"{user}:{password}".encode()).decode()
    while True:
        status, _, topology = get(f"{url}/api/topology", basic)
        if status != 200:
            print(json.dumps({"error": f"/api/topology with credentials: {status}"}))
            return 1
        if settled(topology, list(routers)) or time.monotonic() - started > float(seconds):
            break
        time.sleep(2)
    status, _, health = get(f"{url}/api/health", basic)
    if status != 200:
        print(json.dumps({"error": f"/api/health: {status}"}))
        return 1
    waited = time.monotonic()
    while True:
        status, _, flows = get(f"{url}/api/flows?minutes=60", basic)
        if status != 200:
            print(json.dumps({"error": f"/api/flows: {status}"}))
            return 1
        complete = flows.get("available") and flows["records"] and not flows["unanswered"]
        if complete or time.monotonic() - waited > float(seconds):
            break
        time.sleep(2)
    found = {
        "unauthenticated": unauthenticated,
        "topology": topology,
        "health": health,
        "flows": flows,
        "seconds": round(time.monotonic() - started, 1),
    }
    print(json.dumps(found))
    return 0


if __name__ == "__main__":
    sys.exit(main(*sys.argv[1:]))
