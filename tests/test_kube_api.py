"""The CRDs and every example manifest on a real Kubernetes API server, when one is at hand.

Twice a CRD passed every test here and was refused by a real API server: tests that evaluate CEL
rules in Python cannot see the server's estimate of what a rule costs, nor anything else only it
does. So this applies crds/ to a real one and creates every example object there (server-side dry
run: nothing is stored), then the objects the model tests call valid and invalid
(tests/test_operator_crds.py), which must be accepted with the defaults our emulation fills in,
or refused with the same message.

Where the server comes from: ``KUBECONFIG`` when it names one that answers (the CRDs are then
applied to that cluster, as ``kubectl apply -f crds/`` would); else the kit's ``kube-aid
apiserver-up`` (shared/tools/kube), started and stopped here, when ``kube-aid`` is on PATH; else
the test is skipped, and says so (``make test`` shows skip reasons).
"""

from __future__ import annotations

import contextlib
import json
import os
import shutil
import subprocess
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import kubernetes.client
import kubernetes.config
import pytest
import yaml
from crd_semantics import apply_defaults
from kubernetes.client.exceptions import ApiException
from router_operator.resources.models import GROUP, KINDS, VERSION
from test_operator_crds import INVALID, VALID, schema

ROOT = Path(__file__).resolve().parents[1]
CRDS = sorted((ROOT / "crds").glob("*.routernet.io.yaml"))
EXAMPLES = sorted((ROOT / "examples").rglob("*.yaml"))
PLURALS = {kind.kind_name: kind.plural for kind in KINDS}
FIELD_MANAGER = "routernet-tests"
NAMESPACE = "default"
"""Where the example objects are tried (dry run): one that exists on every cluster."""


def _client(kubeconfig: str) -> kubernetes.client.ApiClient:
    return kubernetes.config.new_client_from_config(config_file=kubeconfig, persist_config=False)


def _answers(kubeconfig: str) -> str | None:
    """None when the API server of ``kubeconfig`` answers, else why not."""
    try:
        with _client(kubeconfig) as client:
            kubernetes.client.VersionApi(client).get_code(_request_timeout=5)
    except Exception as err:  # any failure to reach it is a reason to look elsewhere
        return f"{type(err).__name__}: {str(err).splitlines()[0][:200]}"
    return None


@contextlib.contextmanager
def api_server() -> Iterator[str]:
    """A kubeconfig whose API server answers, for as long as the test needs it."""
    reasons = []
    kubeconfig = os.environ.get("KUBECONFIG")
    if kubeconfig:
        reason = _answers(kubeconfig)
        if reason is None:
            yield kubeconfig
            return
        reasons.append(f"KUBECONFIG={kubeconfig} does not answer ({reason})")
    else:
        reasons.append("KUBECONFIG is not set")
    kit = shutil.which("kube-aid")
    if kit is None:
        reasons.append("kube-aid (shared/tools/kube) is not on PATH")
        pytest.skip("no Kubernetes API server to check the CRDs on: " + "; ".join(reasons))
    env = dict(line.removeprefix("export ").split("=", 1) for line in _kit(kit, "env").split("\n"))
    kit_config = env["KUBECONFIG"].strip("'\"")
    ours = _answers(kit_config) is not None  # none runs yet: this test starts and stops it
    if ours:
        _kit(kit, "apiserver-up")
    try:
        assert _answers(kit_config) is None, f"kube-aid apiserver-up: {_answers(kit_config)}"
        yield kit_config
    finally:
        if ours:
            _kit(kit, "apiserver-down")


def _kit(kit: str, command: str) -> str:
    done = subprocess.run([kit, command], capture_output=True, text=True, timeout=120, check=False)
    assert done.returncode == 0, f"kube-aid {command}: {done.stdout}{done.stderr}"
    return done.stdout.strip()


def _apply_crds(client: kubernetes.client.ApiClient) -> list[str]:
    """Every CRD created, or replaced where it exists (what ``kubectl apply -f crds/`` does);
    the refusals, one line each."""
    api = kubernetes.client.ApiextensionsV1Api(client)
    refused = []
    for path in CRDS:
        crd = yaml.safe_load(path.read_text(encoding="utf-8"))
        try:
            try:
                api.create_custom_resource_definition(crd, field_manager=FIELD_MANAGER)
            except ApiException as err:
                if err.status != 409:
                    raise
                stored = api.read_custom_resource_definition(crd["metadata"]["name"])
                crd["metadata"]["resourceVersion"] = stored.metadata.resource_version
                api.replace_custom_resource_definition(
                    crd["metadata"]["name"], crd, field_manager=FIELD_MANAGER
                )
        except ApiException as err:
            refused.append(f"{path.name}: {_message(err)}")
    return refused


def _established(client: kubernetes.client.ApiClient, timeout: float = 30.0) -> None:
    api = kubernetes.client.ApiextensionsV1Api(client)
    deadline = time.monotonic() + timeout
    waiting = [p.name.removesuffix(".yaml") for p in CRDS]
    while waiting:
        crd = api.read_custom_resource_definition(waiting[0])
        conditions = {c.type: c.status for c in (crd.status.conditions or [])}
        if conditions.get("Established") == "True":
            waiting.pop(0)
            continue
        assert time.monotonic() < deadline, f"{waiting[0]} not Established: {conditions}"
        time.sleep(0.2)


def _message(err: ApiException) -> str:
    try:
        return str(json.loads(err.body)["message"])
    except (TypeError, ValueError, KeyError):
        return f"{err.status} {err.reason}"


def _dry_run(client: kubernetes.client.ApiClient, obj: dict[str, Any]) -> dict[str, Any]:
    """The object as the server would store it, in NAMESPACE; ApiException when refused.
    Strict field validation, as ``kubectl apply`` has by default."""
    obj = {**obj, "metadata": {k: v for k, v in obj["metadata"].items() if k != "namespace"}}
    result: dict[str, Any] = kubernetes.client.CustomObjectsApi(
        client
    ).create_namespaced_custom_object(
        GROUP,
        VERSION,
        NAMESPACE,
        PLURALS[obj["kind"]],
        obj,
        dry_run="All",
        field_validation="Strict",
    )
    return result


@pytest.mark.timeout(300)
def test_crds_and_examples_on_a_real_api_server() -> None:
    with api_server() as kubeconfig, _client(kubeconfig) as client:
        print(f"\nAPI server of {kubeconfig}")
        assert _apply_crds(client) == []
        _established(client)
        print(f"applied {len(CRDS)} CRDs")

        refused = []
        examples = [  # Routernet's kinds (examples/spark/ has the Spark Operator's)
            (path, doc)
            for path in EXAMPLES
            for doc in yaml.safe_load_all(path.read_text(encoding="utf-8"))
            if doc and doc["apiVersion"].startswith(f"{GROUP}/")
        ]
        for path, doc in examples:
            try:
                _dry_run(client, doc)
            except ApiException as err:
                refused.append(f"{path.relative_to(ROOT)} {doc['kind']}: {_message(err)}")
        assert refused == []
        print(f"created {len(examples)} example objects (dry run)")

        # Our emulation of the server (crd_semantics.py) against the server itself.
        stored_differently = []
        for kind, obj in VALID:
            try:
                stored = _dry_run(client, obj)
            except ApiException as err:
                refused.append(f"{kind.kind_name} {json.dumps(obj['spec'])}: {_message(err)}")
                continue
            expected = apply_defaults(schema(kind), obj).get("spec")
            if stored.get("spec") != expected:
                stored_differently.append((obj, stored.get("spec"), expected))
        assert refused == []
        assert stored_differently == []
        accepted = []
        for kind, obj, phrase in INVALID:
            try:
                _dry_run(client, obj)
                accepted.append(f"{kind.kind_name} {json.dumps(obj.get('spec'))}")
            except ApiException as err:
                if phrase is not None and phrase not in _message(err):
                    refused.append(f"{phrase!r} not in {_message(err)!r}")
        assert accepted == []
        assert refused == []
        print(f"{len(VALID)} valid objects stored as emulated, {len(INVALID)} invalid refused")
