"""``routernet up``'s backend: the same Router, Address, LinkRoute and Gateway files
``kubectl apply`` takes, run as router processes on 127.0.0.x (backend.py, files.py), with a
collector (collector.py), the autoscaler process (scaler.py; its state and start/stop,
scaler_control.py), scale-in hand-off (handoff.py) and
stopping what it started (terminate.py).

May import: resources, planning, autoscaling. Not kubernetes/, and nothing that imports kopf or
the Kubernetes client: ``routernet`` runs in the router image, which has neither.
"""
