#!/usr/bin/env bash
# Set everything up, then attach a throwaway network namespace with the real
# reference plugins, show the result, check it, and detach it again.
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/setup.sh
exec .venv/bin/libcni demo "$@"
