"""A router in a Kubernetes pod: the API client it uses without the kubernetes package
(kubeapi.py), and what it reports onto its own Pod: report.py the annotations' format (pure,
read by the operator too), status.py the writer.

May import: router.config (its ConfigMap watch's thread), router.log.
"""
