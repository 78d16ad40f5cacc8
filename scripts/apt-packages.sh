# Shared by the install-*.sh scripts (source it; it defines functions only).
#
# apt_install_missing NAME FATAL PACKAGE...: installs the Debian packages not installed yet,
# as root (re-running the calling script under passwordless sudo when not root). Without root
# or apt-get it says what is missing and returns FATAL's status (0: the tests that need the
# packages skip). Service starts are denied while installing (a policy-rc.d, unless one exists):
# the tests run private daemons and never the system's own.

missing_packages() {
    local pkg status
    for pkg in "$@"; do
        status=$(dpkg-query -W -f='${Status}' "$pkg" 2>/dev/null || true)
        if [[ "$status" != "install ok installed" ]]; then
            echo "$pkg"
        fi
    done
}

apt_install_missing() {
    local name=$1 fatal=$2
    shift 2
    local missing
    mapfile -t missing < <(missing_packages "$@")
    [[ ${#missing[@]} -eq 0 ]] && return 0
    if [[ $(id -u) -ne 0 ]]; then
        if command -v sudo >/dev/null 2>&1 && sudo -n true 2>/dev/null; then
            exec sudo -n "$0"
        fi
        echo "$name: not root and no passwordless sudo; not installing ${missing[*]}" >&2
        return "$fatal"
    fi
    if ! command -v apt-get >/dev/null 2>&1; then
        echo "$name: no apt-get here; install ${missing[*]} yourself" >&2
        return "$fatal"
    fi
    echo "$name: installing ${missing[*]}" >&2
    export DEBIAN_FRONTEND=noninteractive
    local policy=/usr/sbin/policy-rc.d created=0
    if [[ ! -e $policy ]]; then
        printf '#!/bin/sh\nexit 101\n' > "$policy" && chmod +x "$policy" && created=1
    fi
    # Update the index only when an install fails on a missing or stale index.
    if ! apt-get install -y -q --no-install-recommends "${missing[@]}" >/dev/null 2>&1; then
        apt-get update -q >/dev/null
        apt-get install -y -q --no-install-recommends "${missing[@]}" >/dev/null
    fi
    if [[ $created -eq 1 ]]; then rm -f "$policy"; fi
}
