#!/bin/sh
# Installs what the fleet tests (tests/fleet) need: sshd, ssh-keygen and ip; pgbouncer, which
# the pooler test (tests/integration/test_pgbouncer.py) starts on its own port; and nft, which the
# Ansible test's firewall role runs inside its namespace hosts (rules there stay there); and
# promtool (Debian's prometheus package), which checks the shipped alerting rules.
# Idempotent: runs `apt-get update` and `apt-get install` only when something is missing.
set -eu

missing=""
[ -x /usr/sbin/sshd ] || missing="$missing openssh-server"
command -v ssh-keygen >/dev/null 2>&1 || missing="$missing openssh-client"
command -v ip >/dev/null 2>&1 || missing="$missing iproute2"
[ -x /usr/sbin/pgbouncer ] || missing="$missing pgbouncer"
[ -x /usr/sbin/nft ] || missing="$missing nftables"
command -v promtool >/dev/null 2>&1 || missing="$missing prometheus"

if [ -z "$missing" ]; then
    echo "fleet prerequisites present"
    exit 0
fi

SUDO=""
[ "$(id -u)" -eq 0 ] || SUDO="sudo"
echo "installing:$missing"
$SUDO apt-get update -qq
# The tests start their own sshd and pgbouncer instances, and need only prometheus's promtool:
# no package's service is started (policy-rc.d says "not now" for the install's length).
policy=/usr/sbin/policy-rc.d
if [ ! -e "$policy" ]; then
    printf '#!/bin/sh\nexit 101\n' | $SUDO tee "$policy" >/dev/null
    $SUDO chmod +x "$policy"
    trap '$SUDO rm -f "$policy"' EXIT
fi
DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -qq --no-install-recommends $missing
# sshd refuses to start without its privilege-separation directory.
$SUDO mkdir -p /run/sshd
