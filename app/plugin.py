"""``kubectl-hami``: the kubectl plugin. On PATH, ``kubectl hami quota …`` and ``kubectl hami review …`` run the
``hami-webhook`` commands of the same names (kubectl finds plugins by their ``kubectl-`` name and passes every
argument after ``hami`` through). As kubectl does: a usage error exits 1 with ``error: …``.
"""

from __future__ import annotations

import sys
from collections.abc import Sequence

COMMANDS = ("quota", "review")
USAGE = """Usage: kubectl hami COMMAND [flags]

Commands:
  quota    show each quota'd namespace's device quota: limit, used, held, free (-n NS | -A, -o wide|json|yaml)
  review   show what the API server and hami-webhook would do to Pods and workloads in a file, offline

Use "kubectl hami COMMAND --help" for a command's flags.
"""


def main(argv: Sequence[str] | None = None) -> int:
    args = list(sys.argv[1:] if argv is None else argv)
    if not args or args[0] in ("-h", "--help", "help"):
        print(USAGE, end="")
        return 0
    if args[0] not in COMMANDS:
        print(f'error: unknown command "{args[0]}" for "kubectl hami"', file=sys.stderr)
        print('Run "kubectl hami --help" for usage.', file=sys.stderr)
        return 1
    from app.cli import main as cli_main

    try:
        return cli_main(args, prog="kubectl hami")
    except SystemExit as exc:  # argparse: --help exits 0, a usage error 2, which kubectl spells 1
        code = exc.code if isinstance(exc.code, int) else 1
        return 1 if code == 2 else code
