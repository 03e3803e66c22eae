#!/usr/bin/env bash
# Install and run the webhook on https://localhost:9443 with a self-signed CA made on the spot (no cluster needed).
# Another address: --bind HOST:PORT, or HAMI_WEBHOOK_BIND=HOST:PORT; other arguments go to `hami-webhook local`.
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/bootstrap.sh
bind="${HAMI_WEBHOOK_BIND:-127.0.0.1:9443}"
args=("$@")
for ((i = 0; i < ${#args[@]}; i++)); do
  case "${args[i]}" in
    --bind) bind="${args[i + 1]:-}" ;;
    --bind=*) bind="${args[i]#--bind=}" ;;
  esac
done
# Before the banner: a taken port would otherwise print "serving ... try: curl" and then fail.
if ! problem="$(.venv/bin/python - "$bind" <<'PY'
import errno, socket, sys
host, _, port = sys.argv[1].rpartition(":")
try:
    family, kind, proto, _, address = socket.getaddrinfo(host.strip("[]") or None, int(port), type=socket.SOCK_STREAM)[0]
    with socket.socket(family, kind, proto) as sock:
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)  # as gunicorn binds
        sock.bind(address)
except ValueError:
    pass  # not HOST:PORT: hami-webhook says so
except OSError as exc:
    print("is already in use" if exc.errno == errno.EADDRINUSE else f"cannot be listened on: {exc.strerror or exc}")
    sys.exit(1)
PY
)"; then
  port="${bind##*:}"
  cat >&2 <<MSG
run-local.sh: ${bind} ${problem} (another run-local.sh?). Choose another address, e.g.:
  ./scripts/run-local.sh --bind 127.0.0.1:$((port + 1))
  HAMI_WEBHOOK_BIND=127.0.0.1:$((port + 1)) ./scripts/run-local.sh
MSG
  exit 1
fi
cat >&2 <<'MSG'
run-local.sh: the answer's response.patch is a base64 JSON Patch; to read it, end the curl command below with
  | python3 -c 'import json,sys,base64; print(base64.b64decode(json.load(sys.stdin)["response"]["patch"]).decode())'
MSG
exec .venv/bin/hami-webhook local --bind "$bind" "$@"
