"""Autoscaling's arithmetic and decisions: the HorizontalPodAutoscaler's algorithm for Routers
(hpa.py), a Router's load from what its routers serve on ``/metrics`` (load.py), predictive
floors from the pipeline's recommendation (predict.py), one scaling decision (scaler.py), all
pure; and the one piece of I/O both autoscalers share, reading ``/metrics`` (scrape.py). The
loops that act on them are the operator's (kubernetes/autoscaler.py) and ``routernet up``'s
(local/scaler.py).

May import: resources, planning.
"""
