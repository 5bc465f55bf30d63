#!/usr/bin/env bash
# Local S3 servers for om4's object-storage tests: moto's server (PyPI `moto[server]`), installed
# into its own virtual environment, listening on 127.0.0.1 only, at free ports. Two of them:
#   - an open one (any or no credentials accepted; buckets made public by the tests);
#   - one that checks credentials (moto's IAM authentication), with one user whose key may read and
#     write everything and a bucket `om4-auth`: for the wrong-credentials tests.
#
#   eval "$(scripts/s3-server.sh)"     # install if needed, start if not running; exports
#                                      # OM4_S3_ENDPOINT, OM4_S3_AUTH_ENDPOINT, OM4_S3_AUTH_KEY_ID,
#                                      # OM4_S3_AUTH_SECRET
#   scripts/s3-server.sh stop          # stop the servers this script started
#
# Idempotent: servers it started earlier (pid, endpoint and key under $OM4_S3_DIR, default
# target/s3-server) are reused while they answer. Needs python3 (with venv) and access to PyPI the
# first time. Prints only `export ...` lines on stdout; progress goes to stderr.
set -euo pipefail
cd "$(dirname "$0")/.."
dir=${OM4_S3_DIR:-target/s3-server}
mkdir -p "$dir"
dir=$(cd "$dir" && pwd)
moto_version=${OM4_MOTO_VERSION:-5.2.5}
py=$dir/venv/bin/python

running() { # name
  [[ -f $dir/$1.pid && -f $dir/$1.endpoint ]] && kill -0 "$(cat "$dir/$1.pid")" 2>/dev/null \
    && curl -sS -o /dev/null --max-time 2 "$(cat "$dir/$1.endpoint")/moto-api/" 2>/dev/null
}

if [[ ${1:-start} == stop ]]; then
  for name in open auth; do
    if [[ -f $dir/$name.pid ]] && kill -0 "$(cat "$dir/$name.pid")" 2>/dev/null; then
      kill "$(cat "$dir/$name.pid")"
      echo "stopped the $name S3 server (pid $(cat "$dir/$name.pid"))" >&2
    fi
    rm -f "$dir/$name.pid" "$dir/$name.endpoint"
  done
  rm -f "$dir/auth.key"
  exit 0
fi

if [[ ! -x $dir/venv/bin/moto_server ]]; then
  echo "installing moto[server]==$moto_version into $dir/venv" >&2
  python3 -m venv "$dir/venv" >&2
  "$dir/venv/bin/pip" install --quiet --disable-pip-version-check "moto[server]==$moto_version" >&2
fi

start() { # name [env assignments...]
  local name=$1; shift
  if running "$name"; then return 0; fi
  local port endpoint
  port=$("$py" -c 'import socket; s = socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])')
  endpoint=http://127.0.0.1:$port
  # setsid: the server outlives this script (and the CI step's shell) until `stop`.
  env "$@" setsid "$dir/venv/bin/moto_server" -H 127.0.0.1 -p "$port" >"$dir/$name.log" 2>&1 < /dev/null &
  echo $! > "$dir/$name.pid"
  echo "$endpoint" > "$dir/$name.endpoint"
  for _ in $(seq 1 100); do
    if running "$name"; then
      echo "S3 server '$name' (moto) at $endpoint, pid $(cat "$dir/$name.pid"), log $dir/$name.log" >&2
      return 0
    fi
    sleep 0.1
  done
  echo "the $name S3 server did not start; its log ($dir/$name.log):" >&2
  cat "$dir/$name.log" >&2
  exit 1
}

start open
if ! running auth || [[ ! -f $dir/auth.key ]]; then
  rm -f "$dir/auth.key"
  # The first 3 requests go unauthenticated: they make the user, its key and its policy.
  start auth INITIAL_NO_AUTH_ACTION_COUNT=3
  "$py" - "$(cat "$dir/auth.endpoint")" "$dir/auth.key" <<'EOF'
import json, sys
import boto3
endpoint, out = sys.argv[1:]
kw = dict(endpoint_url=endpoint, region_name="us-east-1")
iam = boto3.client("iam", aws_access_key_id="setup", aws_secret_access_key="setup", **kw)
iam.create_user(UserName="om4")
key = iam.create_access_key(UserName="om4")["AccessKey"]
policy = {"Version": "2012-10-17", "Statement": [{"Effect": "Allow", "Action": "s3:*", "Resource": "*"}]}
iam.put_user_policy(UserName="om4", PolicyName="all", PolicyDocument=json.dumps(policy))
s3 = boto3.client("s3", aws_access_key_id=key["AccessKeyId"], aws_secret_access_key=key["SecretAccessKey"], **kw)
s3.create_bucket(Bucket="om4-auth")
with open(out, "w") as f:
    f.write(f"{key['AccessKeyId']} {key['SecretAccessKey']}\n")
EOF
fi
read -r key_id secret < "$dir/auth.key"
echo "export OM4_S3_ENDPOINT=$(cat "$dir/open.endpoint")"
echo "export OM4_S3_AUTH_ENDPOINT=$(cat "$dir/auth.endpoint")"
echo "export OM4_S3_AUTH_KEY_ID=$key_id"
echo "export OM4_S3_AUTH_SECRET=$secret"
