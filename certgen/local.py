"""`certgen local` / `write_local`: the CA and serving pair as files in a directory, kept while valid (for
`hami-webhook local`, run-local.sh and the tests' TLS servers); the decision is `certgen.pki.reconcile`'s."""

from __future__ import annotations

import os
import tempfile
from collections.abc import Sequence
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path

from certgen import log
from certgen.pki import Policy, Stored, reconcile


@dataclass(frozen=True)
class LocalFiles:
    """Paths `write_local` maintains; the webhook serves `cert`/`key`, clients trust `ca_cert`."""

    ca_cert: Path  # out_dir/ca.crt
    cert: Path  # out_dir/tls.crt
    key: Path  # out_dir/tls.key (mode 0600)


def write_local(
    out_dir: str | os.PathLike[str],
    hosts: Sequence[str],
    *,
    now: datetime | None = None,
    policy: Policy = Policy(),
) -> LocalFiles:
    """Keep ``ca.crt``, ``ca.key``, ``tls.crt`` and ``tls.key`` in `out_dir` valid for `hosts`.

    Same decisions as ``certgen create``. A file is replaced atomically and
    only when its bytes change; keys get mode 0600. ``tls.crt`` is written
    last so a reloader watching it always finds the matching ``tls.key``.
    """
    directory = Path(out_dir)
    directory.mkdir(mode=0o700, parents=True, exist_ok=True)
    files = LocalFiles(directory / "ca.crt", directory / "tls.crt", directory / "tls.key")
    ca_key = directory / "ca.key"
    bundle = _read(files.ca_cert)
    stored = Stored(bundle, _read(ca_key), bundle, _read(files.cert), _read(files.key))
    plan = reconcile(stored, hosts, policy, now or datetime.now(UTC))
    plan.report()
    material = plan.material
    written = [
        path.name
        for path, data, mode in (
            (ca_key, material.ca_key, 0o600),
            (files.ca_cert, material.bundle, 0o644),
            (files.key, material.key, 0o600),
            (files.cert, material.cert, 0o644),
        )
        if _write_if_changed(path, data, mode)
    ]
    if written:
        log.info("wrote files", dir=directory, files=written)
    else:
        log.info("files unchanged", dir=directory)
    return files


def _read(path: Path) -> bytes | None:
    try:
        return path.read_bytes()
    except FileNotFoundError:
        return None


def _write_if_changed(path: Path, data: bytes, mode: int) -> bool:
    """Atomically replace `path` with `data` unless it already holds exactly that with `mode`."""
    if _read(path) == data and (path.stat().st_mode & 0o777) == mode:
        return False
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.")
    try:
        with os.fdopen(fd, "wb") as handle:
            handle.write(data)
        os.chmod(tmp, mode)
        os.replace(tmp, path)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise
    return True
