"""Containers as seed 001 addresses them: where each is (table.py), and routing to them
(routing.py)."""
