#!/usr/bin/env bash
# What libcni and its demo need on a fresh Debian machine (run as root): the
# reference CNI plugins, iproute2, iptables, Python with venv, and a virtual
# environment in .venv with libcni.
#   --test   also what the tests need: a C compiler (the benchmark plugin) and
#            the test tools in .venv (pytest, hypothesis, ruff, mypy, sphinx...);
#            scripts/test.sh passes it, with Go and its libcni as more packages.
# Other arguments: more Debian packages to install.
set -euo pipefail
cd "$(dirname "$0")/.."

extras=""
apt_options=(--no-install-recommends)   # the demo needs none of the recommended packages
packages=(containernetworking-plugins iproute2 iptables python3 python3-venv)
if [ "${1:-}" = "--test" ]; then
    shift
    extras="[test]"
    apt_options=()   # gcc needs its recommended libc6-dev to link
    packages+=(gcc)
fi
packages+=("$@")

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
    apt-get install -y -qq ${apt_options[@]+"${apt_options[@]}"} "${missing[@]}" >/dev/null
fi

if [ ! -x .venv/bin/python ]; then
    python3 -m venv .venv
fi
.venv/bin/python -m pip install -q --disable-pip-version-check -e ".${extras}"
