"""spark-submit's entry file: `spark-submit [--master ...] pipeline/job.py analyze DATASET ...`.

spark-submit runs this file as a script, so the package may not be importable yet: from a
checkout its parent directory is put on sys.path (with --py-files the zip already is). The
master is the one spark-submit was given (cli.py sets none unless --master is passed).
"""

import sys
from pathlib import Path

try:
    import pipeline  # noqa: F401
except ImportError:
    sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from pipeline.cli import main

sys.exit(main())
