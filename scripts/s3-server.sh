#!/usr/bin/env bash
# A local S3 server for om4's object-storage tests: moto's server (PyPI `moto[server]`), installed
# into its own virtual environment and listening on 127.0.0.1 only, at a free port.
#
#   eval "$(scripts/s3-server.sh)"     # install if needed, start if not running; exports OM4_S3_ENDPOINT
#   scripts/s3-server.sh stop          # stop the server this script started
#
# Idempotent: a server it started earlier (pid and endpoint under $OM4_S3_DIR, default
# target/s3-server) is reused while it answers. Needs python3 (with venv) and access to PyPI the
# first time. Prints one line on stdout, `export OM4_S3_ENDPOINT=http://127.0.0.1:PORT`; progress
# goes to stderr.
set -euo pipefail
cd "$(dirname "$0")/.."
dir=${OM4_S3_DIR:-target/s3-server}
mkdir -p "$dir"
dir=$(cd "$dir" && pwd)
pidfile=$dir/pid
endpointfile=$dir/endpoint
moto_version=${OM4_MOTO_VERSION:-5.2.5}

running() {
  [[ -f $pidfile && -f $endpointfile ]] && kill -0 "$(cat "$pidfile")" 2>/dev/null \
    && curl -fsS -o /dev/null --max-time 2 "$(cat "$endpointfile")/moto-api/" 2>/dev/null
}

if [[ ${1:-start} == stop ]]; then
  if [[ -f $pidfile ]] && kill -0 "$(cat "$pidfile")" 2>/dev/null; then
    kill "$(cat "$pidfile")"
    echo "stopped the S3 server (pid $(cat "$pidfile"))" >&2
  fi
  rm -f "$pidfile" "$endpointfile"
  exit 0
fi

if running; then
  echo "export OM4_S3_ENDPOINT=$(cat "$endpointfile")"
  exit 0
fi

if [[ ! -x $dir/venv/bin/moto_server ]]; then
  echo "installing moto[server]==$moto_version into $dir/venv" >&2
  python3 -m venv "$dir/venv" >&2
  "$dir/venv/bin/pip" install --quiet --disable-pip-version-check "moto[server]==$moto_version" >&2
fi

port=$("$dir/venv/bin/python" -c 'import socket; s = socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])')
endpoint=http://127.0.0.1:$port
# setsid: the server outlives this script (and the CI step's shell) until `stop`.
setsid "$dir/venv/bin/moto_server" -H 127.0.0.1 -p "$port" >"$dir/server.log" 2>&1 < /dev/null &
echo $! > "$pidfile"
echo "$endpoint" > "$endpointfile"
for _ in $(seq 1 100); do
  if running; then
    echo "S3 server (moto) at $endpoint, pid $(cat "$pidfile"), log $dir/server.log" >&2
    echo "export OM4_S3_ENDPOINT=$endpoint"
    exit 0
  fi
  sleep 0.1
done
echo "the S3 server did not start; its log ($dir/server.log):" >&2
cat "$dir/server.log" >&2
exit 1
