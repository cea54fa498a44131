"""Rendering plans into the Kubernetes objects that run them, as plain dicts: a Router's
StatefulSet, Services, ConfigMap and RBAC (router.py), its HPA or ScaledObject (autoscaler.py),
a network's collector (collector.py) and its recommendations' CronJob (recommend.py). Pure.

May import: resources, planning, autoscaling.
"""
