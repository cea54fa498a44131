"""Global addressing between containers and networks: the ``gateway`` section of the router's
configuration (config.py) and the rules that pick a container for ``()/node`` (rules.py)."""
