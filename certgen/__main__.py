"""``python -m certgen``: the same entry point as the ``certgen`` console script."""

from certgen.cli import main

raise SystemExit(main())
