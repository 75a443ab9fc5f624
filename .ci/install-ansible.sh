#!/bin/sh
# Installs what the Ansible tests (tests/ansible) need beyond the test extras (ansible-core and
# ansible-lint come from pyproject's `test` extra):
#   - systemd's `systemd-analyze` (verifies the rendered units), PostgreSQL 15 (the database
#     role's throwaway cluster) and python3-apt (Ansible's apt module on the test hosts);
#   - build/wheelhouse: wheels of scrapefleet's dependencies and of its build backend, so the
#     tests build this checkout's wheel and install it into each test host's virtualenv
#     offline (pip --no-index), with no registry traffic during the tests.
# Idempotent: apt runs only when something is missing; pip reuses its cache.
set -eu
cd "$(dirname "$0")/.."

missing=""
command -v systemd-analyze >/dev/null 2>&1 || missing="$missing systemd"
command -v pg_createcluster >/dev/null 2>&1 || missing="$missing postgresql-15"
/usr/bin/python3 -c 'import apt' >/dev/null 2>&1 || missing="$missing python3-apt"

if [ -n "$missing" ]; then
    SUDO=""
    [ "$(id -u)" -eq 0 ] || SUDO="sudo"
    echo "installing:$missing"
    $SUDO apt-get -o DPkg::Lock::Timeout=600 update -qq
    DEBIAN_FRONTEND=noninteractive $SUDO apt-get -o DPkg::Lock::Timeout=600 install -y -qq \
        --no-install-recommends $missing
fi

python="${PYTHON:-.venv/bin/python}"
# [demo]: pgserver too, for the packaging test's demo in a fresh virtualenv.
"$python" -m pip wheel --quiet --wheel-dir build/wheelhouse '.[demo]' "setuptools>=77" wheel
echo "ansible test prerequisites present; wheels in build/wheelhouse"
