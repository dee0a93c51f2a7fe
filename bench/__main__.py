"""``python -m bench``: see ``bench/core/cli.py`` for the options, ``bench/README.md`` for the figures."""

from bench.core.cli import main

raise SystemExit(main())
