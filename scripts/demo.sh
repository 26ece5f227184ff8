#!/usr/bin/env bash
# Install only what the demo needs (the reference plugins, iproute2, iptables,
# Python and a virtual environment with libcni: no test tools), then attach a
# throwaway network namespace with the real reference plugins, show the
# result, check it, and detach it again (examples/demo.py, not part of the
# installed package). The tests' tools: scripts/test.sh.
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/setup.sh
exec .venv/bin/python examples/demo.py "$@"
