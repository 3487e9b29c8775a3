#!/usr/bin/env bash
# System packages the tests use that pip cannot bring: Debian's Chromium (the inspector's
# browser tests, issue 33) and PostgreSQL 15's server binaries (the Postgres stores, issue 34).
# Idempotent: installs only what is missing; a machine without apt-get or root gets a clear
# message and the tests that need these skip saying so.
set -euo pipefail
need=()
[ -x /usr/bin/chromium ] || need+=(chromium)
[ -x /usr/bin/chromedriver ] || need+=(chromium-driver)
ls /usr/lib/postgresql/*/bin/initdb >/dev/null 2>&1 || need+=(postgresql)
if [ ${#need[@]} -eq 0 ]; then
  exit 0
fi
if ! command -v apt-get >/dev/null 2>&1 || [ "$(id -u)" != 0 ]; then
  echo "system-deps: cannot install ${need[*]} (needs apt-get as root); the tests that use them will skip" >&2
  exit 0
fi
export DEBIAN_FRONTEND=noninteractive
apt-get install -y -q "${need[@]}" >/dev/null 2>&1 || { apt-get update -q >/dev/null && apt-get install -y -q "${need[@]}" >/dev/null; }
echo "system-deps: installed ${need[*]}"
