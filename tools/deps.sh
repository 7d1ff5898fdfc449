#!/bin/sh
# deps.sh - install what building and testing ember needs on Debian 12 (run as
# root).  Idempotent and quick when everything is present: it only calls
# apt-get for packages dpkg does not already have, and npm only when the
# lockfile's packages are missing.
set -e
cd "$(dirname "$0")/.."

PKGS="gcc make clang libclang-rt-14-dev libinih-dev libssl-dev libsqlite3-dev pkg-config
      redis-server memcached gnuplot-nox procps iproute2 iptables strace curl libraft-dev libuv1-dev
      libdeflate-dev zlib1g-dev chromium fonts-liberation liburing-dev"
missing=""
for p in $PKGS; do
    dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing="$missing $p"
done
# Node.js: any node >= 18 on PATH will do (the integration tests need it).
if ! command -v node >/dev/null 2>&1 || ! command -v npm >/dev/null 2>&1; then
    missing="$missing nodejs npm"
fi
if [ -n "$missing" ]; then
    echo "deps: installing$missing"
    export DEBIAN_FRONTEND=noninteractive
    apt-get update -qq
    apt-get install -y -qq --no-install-recommends $missing >/dev/null
fi

if [ -f tests/node/package-lock.json ] && [ ! -d tests/node/node_modules/apache-ignite-client ]; then
    echo "deps: npm ci (tests/node)"
    (cd tests/node && npm ci --no-audit --no-fund --loglevel=error >/dev/null)
fi
exit 0
