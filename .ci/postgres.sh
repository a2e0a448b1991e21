#!/usr/bin/env bash
# Makes a PostgreSQL server answer on 127.0.0.1:5432 (user postgres, trust
# auth, a database `test`) for the store's tests, installing and starting
# it where missing; exits non-zero when it cannot. `.ci/run` runs it and
# then sets AX_REQUIRE_PG=1, so the PostgreSQL tests must run.
# With AX_TEST_PG set, that server is used as it is.
set -euo pipefail

if [ -n "${AX_TEST_PG:-}" ]; then
  echo "PostgreSQL for the tests: AX_TEST_PG (not managed here)"
  exit 0
fi

answers() {
  command -v psql >/dev/null 2>&1 &&
    psql -h 127.0.0.1 -U postgres -d postgres -tAc 'SELECT 1' >/dev/null 2>&1
}

if ! answers; then
  if ! command -v pg_ctlcluster >/dev/null 2>&1; then
    echo "installing postgresql"
    apt-get update -qq
    DEBIAN_FRONTEND=noninteractive apt-get install -y -qq postgresql
  fi
  version=$(ls /etc/postgresql | sort -V | tail -1)
  if [ -z "$version" ]; then
    echo "postgresql installed but no cluster in /etc/postgresql" >&2
    exit 1
  fi
  hba=/etc/postgresql/$version/main/pg_hba.conf
  # Trust for local and loopback connections, ahead of the packaged rules
  # (the first matching line wins). Only for a CI or test machine.
  if ! grep -q '^host all all 127.0.0.1/32 trust' "$hba"; then
    sed -i '1i local all all trust\nhost all all 127.0.0.1/32 trust\nhost all all ::1/128 trust' "$hba"
  fi
  if pg_ctlcluster "$version" main status >/dev/null 2>&1; then
    pg_ctlcluster "$version" main reload
  else
    pg_ctlcluster "$version" main start || service postgresql start
  fi
  for _ in $(seq 1 60); do
    answers && break
    sleep 0.5
  done
  if ! answers; then
    echo "PostgreSQL does not answer on 127.0.0.1:5432 as user postgres" >&2
    exit 1
  fi
fi
if ! psql -h 127.0.0.1 -U postgres -d postgres -tAc "SELECT 1 FROM pg_database WHERE datname = 'test'" | grep -q 1; then
  psql -h 127.0.0.1 -U postgres -d postgres -qc 'CREATE DATABASE test'
fi
echo "PostgreSQL for the tests: postgres://postgres@127.0.0.1:5432/test"
