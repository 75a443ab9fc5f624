#!/bin/sh
# Build, once on the control node, everything the hosts install: the scrapefleet wheel and
# wheelhouse.tar (every dependency's wheel) side by side in DIR. The roles copy both to each host
# and install with pip --no-index: no host needs a package index or npm.
#
#   ansible/build-wheelhouse.sh /srv/scrapefleet
#   ansible-playbook -i inventory.yml site.yml -e scrapefleet_package=/srv/scrapefleet/scrapefleet-0.1.0-py3-none-any.whl
#
# Run it with the Python version the hosts have (Debian 12: 3.11): wheels are per version.
set -eu
out=${1:?usage: build-wheelhouse.sh DIR}
repo=$(cd "$(dirname "$0")/.." && pwd)
python=${PYTHON:-python3}
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT

mkdir -p "$out"
"$python" -m pip wheel --quiet --wheel-dir "$work/all" "$repo"
# The package's own wheel goes beside the archive (it is installed by content); pgserver is the
# demo's embedded database, which no host needs (it is only in the `demo` extra anyway).
mv "$work"/all/scrapefleet-*.whl "$out"/
rm -f "$work"/all/pgserver-*.whl
tar -cf "$out/wheelhouse.tar" -C "$work/all" .
echo "built in $out:" $(cd "$out" && ls scrapefleet-*.whl) "and wheelhouse.tar ($(ls "$work/all" | wc -l) wheels)"
