"""``python -m app``: the ``hami-webhook`` command (``python -m app.cli`` too)."""

from app.cli import main

raise SystemExit(main())
