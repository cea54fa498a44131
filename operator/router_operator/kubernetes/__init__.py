"""The operator on a cluster: its entry point (cli.py, ``routernet-operator``), the kopf handlers
(handlers.py), reconciling a namespace (reconciler.py), the API client (kube.py, api.py), its
settings (environment.py), unsticking rollouts (rollout.py) and the operator as the autoscaler
of Routers whose mode is ``operator`` (autoscaler.py).

May import: resources, planning, autoscaling, rendering. Not local/.
"""
