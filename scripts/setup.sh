#!/usr/bin/env bash
# Everything libcni needs on a fresh Debian machine (run as root):
# the reference CNI plugins, iproute2, iptables, a C compiler for the
# benchmark plugin, and a virtual environment with libcni and its test tools.
# Arguments: more Debian packages to install (scripts/test.sh adds Go and its
# libcni, which the tests of the shared cache build a program against).
set -euo pipefail
cd "$(dirname "$0")/.."

packages=(containernetworking-plugins iproute2 iptables gcc python3 python3-venv "$@")
missing=()
for p in "${packages[@]}"; do
    dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
done
if ((${#missing[@]})); then
    if [ "$(id -u)" -ne 0 ]; then
        echo "setup: missing Debian packages: ${missing[*]}" >&2
        echo "setup: run as root, or: sudo apt-get install -y ${missing[*]}" >&2
        exit 1
    fi
    echo "setup: installing ${missing[*]}" >&2
    export DEBIAN_FRONTEND=noninteractive
    apt-get update -qq
    apt-get install -y -qq "${missing[@]}" >/dev/null
fi

if [ ! -x .venv/bin/python ]; then
    python3 -m venv .venv
fi
.venv/bin/python -m pip install -q --disable-pip-version-check -e '.[test]'
