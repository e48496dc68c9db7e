# shellcheck shell=bash
# Sourced by .ci/run before the tests: Debian's Chromium and ChromeDriver for the trust panel's
# browser tests, and axe-core (npm, MPL-2.0, fetched here rather than kept in the repository)
# for their accessibility check. Idempotent. Exports ATTESTED_REPLAY_CHROMIUM,
# ATTESTED_REPLAY_CHROMEDRIVER and ATTESTED_REPLAY_AXE_JS. Installs panel-verifier/'s locked
# dependencies (`npm ci`: the versions and integrity hashes of its package-lock.json) so that
# tests/panel/test_bundle.py can rebuild the committed static/verify.js and compare.

if ! (return 0 2>/dev/null); then
  echo "browser.sh: source it (. .ci/browser.sh) so that the paths reach the tests" >&2
  exit 2
fi

_axe_version="4.14.1"
# `npm view axe-core@4.14.1 dist.integrity`: the tarball is refused unless it matches.
_axe_integrity="sha512-FHfa+lmNjQZfJz1q8wKqIDwC6DExcHt/pkjNQb09a3NPjCKg2rhu5qb2S4r76ASyFNNtuFooJpZe37OgudVGtQ=="
_browser_cache="${ATTESTED_REPLAY_BROWSER_CACHE:-$PWD/.cache/browser-tests}"

if [ ! -x /usr/bin/chromium ] || [ ! -x /usr/bin/chromedriver ]; then
  if [ "$(id -u)" -ne 0 ]; then
    echo "browser.sh: chromium and chromium-driver are not installed and this is not root" >&2
    return 1
  fi
  DEBIAN_FRONTEND=noninteractive apt-get update -qq
  DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends \
    chromium chromium-driver >/dev/null
fi

_axe_js="$_browser_cache/axe-core-$_axe_version/axe.min.js"
if [ ! -f "$_axe_js" ]; then
  mkdir -p "$_browser_cache"
  _axe_tgz="$(cd "$_browser_cache" && npm pack --silent "axe-core@$_axe_version")"
  _axe_actual="$(python3 -c 'import base64, hashlib, sys
print("sha512-" + base64.b64encode(hashlib.sha512(open(sys.argv[1], "rb").read()).digest()).decode())' \
    "$_browser_cache/$_axe_tgz")"
  if [ "$_axe_actual" != "$_axe_integrity" ]; then
    echo "browser.sh: axe-core tarball integrity $_axe_actual is not the pinned $_axe_integrity" >&2
    rm -f "$_browser_cache/$_axe_tgz"
    return 1
  fi
  mkdir -p "$_browser_cache/axe-core-$_axe_version"
  tar -xzf "$_browser_cache/$_axe_tgz" -C "$_browser_cache/axe-core-$_axe_version" \
    --strip-components=1 package/axe.min.js package/LICENSE
  rm -f "$_browser_cache/$_axe_tgz"
fi

if [ ! -d panel-verifier/node_modules/esbuild ]; then
  (cd panel-verifier && npm ci --silent --no-audit --no-fund) || {
    echo "browser.sh: npm ci in panel-verifier/ failed" >&2
    return 1
  }
fi

export ATTESTED_REPLAY_CHROMIUM=/usr/bin/chromium
export ATTESTED_REPLAY_CHROMEDRIVER=/usr/bin/chromedriver
export ATTESTED_REPLAY_AXE_JS="$_axe_js"
echo "browser.sh: $(/usr/bin/chromium --version 2>/dev/null), axe-core $_axe_version"
unset _axe_version _axe_integrity _browser_cache _axe_js _axe_tgz _axe_actual
