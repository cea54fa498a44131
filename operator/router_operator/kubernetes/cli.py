"""``routernet-operator``: the operator's entry point, on a laptop and in the chart's pod.

    routernet-operator                      # every namespace, current kubeconfig context
    routernet-operator --namespace msg      # one namespace (repeatable): what rbac.scope=namespace
                                            # grants, and what the chart then passes
    routernet-operator --liveness http://0.0.0.0:8080/healthz --verbose

Configuration the chart passes as environment: ROUTERNET_ROUTER_IMAGE (routers whose Router names
no image), ROUTERNET_ROUTER_IMAGE_PULL_POLICY, ROUTERNET_METRICS_PORT (Prometheus metrics on
:PORT/metrics); also ROUTERNET_CLUSTER_DOMAIN (default cluster.local) for the routers' DNS names.
In a pod it authenticates with its service account, elsewhere with the kubeconfig (KUBECONFIG).
One operator per cluster or namespace: kopf runs standalone (no peering), and the chart's
Deployment has one replica with the Recreate strategy.
"""

from __future__ import annotations

import argparse
import logging
import os
import sys
from collections.abc import Sequence

from router_operator.kubernetes.environment import OperatorConfig


def parse_args(argv: Sequence[str] | None = None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(
        prog="routernet-operator",
        description="Reconciles Routernet Router, Address and LinkRoute resources.",
    )
    parser.add_argument(
        "--namespace",
        "-n",
        action="append",
        default=[],
        metavar="NS",
        help="watch this namespace only (repeatable); default: every namespace",
    )
    parser.add_argument(
        "--liveness",
        metavar="URL",
        help="serve kopf's health endpoint, e.g. http://0.0.0.0:8080/healthz",
    )
    parser.add_argument("--verbose", "-v", action="store_true", help="log debug messages")
    return parser.parse_args(argv)


def main(argv: Sequence[str] | None = None) -> int:
    args = parse_args(argv)
    try:
        config = OperatorConfig.from_env(os.environ)
    except ValueError as err:
        print(f"routernet-operator: {err}", file=sys.stderr)
        return 2
    try:
        import kopf

        from router_operator.kubernetes import handlers
    except ModuleNotFoundError as err:  # pip install routernet without [operator]
        print(
            f"routernet-operator: {err.name} is not installed: the operator is routernet's"
            " optional group [operator] (pip install 'routernet[operator]')",
            file=sys.stderr,
        )
        return 2
    kopf.configure(verbose=args.verbose)
    logging.getLogger("router_operator").setLevel(logging.DEBUG if args.verbose else logging.INFO)
    if not args.verbose:  # a line per liveness probe says nothing
        logging.getLogger("aiohttp.access").setLevel(logging.WARNING)
    namespaces = list(dict.fromkeys(args.namespace))
    memo = kopf.Memo(config=config, namespaced=bool(namespaces))
    kopf.run(
        registry=handlers.registry,
        clusterwide=not namespaces,
        namespaces=namespaces,
        liveness_endpoint=args.liveness,
        standalone=True,
        memo=memo,
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
