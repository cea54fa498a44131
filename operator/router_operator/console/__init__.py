"""``routernet console``: a live web view of a router network, for a network on this machine
(``routernet up``) and, in a Deployment the chart adds, for the networks the operator manages.

What is in the network comes from the routers themselves, asked as ``qdstat`` asks them (their
``$management``); who sent what to whom, with latency, from the collector's dataset. The same
code and pages serve both places: only where the routers are (a source) differs.

| module | concern |
|---|---|
| ``sources.py`` | where the routers are: a state directory's (``Source``, ``Target``) |
| ``kubesource.py`` | where the routers are on Kubernetes: the Routers and their pods |
| ``management.py`` | one router's ``$management``, asked again over one kept connection |
| ``view.py`` | the scraped rows as topology, addresses and nodes, rates between scrapes (pure) |
| ``health.py`` | what is wrong now, one line each with where to look (pure) |
| ``flows.py`` | the collector's flow records of the last minutes as a traffic matrix |
| ``scraper.py`` | the loop that asks every router every few seconds and keeps history |
| ``auth.py`` | basic auth, or a bearer token checked with the API server's TokenReview |
| ``server.py`` | the JSON API under ``/api/`` and the pages under ``static/`` |

May import: the operator's layers below it (resources, planning: the Addresses planned as the
operator plans them; local: the state directory), the router's addressing (address rules
matched as the routers match them), telemetry schema and ``pod.kubeapi`` (the API on the
standard library), and the pipeline's naming of reply addresses. Not kopf, nor the kubernetes
package: ``routernet`` runs in the router image, which has neither.
"""
