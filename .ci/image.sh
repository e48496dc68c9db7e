# shellcheck shell=bash
# Sourced by .ci/run before the tests: debootstrap, runc and skopeo (Debian's) for the
# reproducible-image tests (tests/image/), which build the replay image twice, run it under runc
# and copy it with skopeo; they need root.
# Idempotent: installs only what is missing. Exports ATTESTED_REPLAY_IMAGE_CACHE, the Debian-root
# cache outside the repository, one directory per image/debian.lock (the tests' second build
# never uses it, so two separate debootstraps are always compared).

if ! (return 0 2>/dev/null); then
  echo "image.sh: source it (. .ci/image.sh) so that the cache path reaches the tests" >&2
  exit 2
fi

if [ ! -x /usr/sbin/debootstrap ] || [ ! -x /usr/sbin/runc ] || [ ! -x /usr/bin/skopeo ] \
  || [ ! -f /usr/share/keyrings/debian-archive-keyring.gpg ]; then
  if [ "$(id -u)" -ne 0 ]; then
    echo "image.sh: debootstrap, runc or skopeo is not installed and this is not root" >&2
    return 1
  fi
  DEBIAN_FRONTEND=noninteractive apt-get update -qq
  # runc, not crun: crun 1.8 refuses a host with the hybrid cgroup layout.
  DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends \
    debootstrap runc skopeo debian-archive-keyring >/dev/null
fi
export ATTESTED_REPLAY_IMAGE_CACHE="${ATTESTED_REPLAY_IMAGE_CACHE:-${XDG_CACHE_HOME:-$HOME/.cache}/attested-replay-image-tests}"
mkdir -p "$ATTESTED_REPLAY_IMAGE_CACHE"
