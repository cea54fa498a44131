"""``python -m collector``: the same as ``routernet-collector``."""

from collector.cli import main

raise SystemExit(main())
