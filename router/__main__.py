"""``python -m router``: the same command as the ``routernet-router`` script."""

from router.cli import main

if __name__ == "__main__":
    raise SystemExit(main())
