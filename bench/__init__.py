"""Routernet's benchmarks; `python -m bench` (or `make bench`) runs the one-router benchmark
(`bench/one_router.py`) and the router-network benchmark (`bench/network.py`).

The load comes from small C clients built on Proton's proactor (bench/c/), compiled here by
gcc, so the clients cost far less per message than the router and never set the pace.
"""
