#!/usr/bin/env bash
# Installs the Debian packages the end-to-end tests run for real (see docs/install.md,
# "Developing"): OpenSSH's server and client for MPI pods on the local plane, passt's pasta
# for the egress of the pods' network sandboxes (docs/local-plane.md, "The network sandbox"),
# Chromium for the dashboard's browser tests, and what builds the image without a container
# engine and starts it (mmdebstrap, bubblewrap, umoci, crun: docs/install.md, "Building the
# image without Docker"). Called by `make install`; safe to run again (packages
# already present are skipped). Without root or apt-get it prints what is missing and
# returns 0: the tests that need a missing program are then skipped with the reason printed.
set -euo pipefail

# command-on-PATH -> Debian package that provides it
declare -A NEEDED=(
    [/usr/sbin/sshd]=openssh-server
    [/usr/bin/ssh]=openssh-client
    [/usr/bin/pasta]=passt
    [/usr/bin/chromium]=chromium
    [/usr/bin/mmdebstrap]=mmdebstrap
    [/usr/bin/bwrap]=bubblewrap
    [/usr/bin/umoci]=umoci
    [/usr/bin/crun]=crun
)

missing=()
for path in "${!NEEDED[@]}"; do
    [[ -x "$path" ]] || missing+=("${NEEDED[$path]}")
done
if [[ ${#missing[@]} -eq 0 ]]; then
    exit 0
fi
if [[ $(id -u) -ne 0 ]] || ! command -v apt-get >/dev/null; then
    echo "system-packages: not installing ${missing[*]} (needs root and apt-get);" \
        "the tests that use them will be skipped" >&2
    exit 0
fi
echo "system-packages: installing ${missing[*]}" >&2
export DEBIAN_FRONTEND=noninteractive
apt-get update -qq
apt-get install -y -qq --no-install-recommends "${missing[@]}" >/dev/null
