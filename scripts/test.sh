#!/usr/bin/env bash
# Set everything up, then run the whole test suite: lint, types, docs, tests.
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/setup.sh --test golang-go golang-github-appc-cni-dev
export PATH="$PWD/.venv/bin:$PATH"

echo "== ruff"; ruff check . && ruff format --check .
echo "== mypy"; mypy libcni
# The tests under the same --strict configuration (pyproject.toml): their helpers
# and fixtures are typed seams like the library's.
echo "== mypy tests"; mypy tests
if [ -f docs/conf.py ]; then
    # -n: every cross-reference must resolve (Python's inventory is in docs/_intersphinx:
    # the build needs no network).
    echo "== docs"; sphinx-build -n -q -W --keep-going -b html docs docs/_build/html
fi
echo "== package"; bash scripts/check_package.sh
echo "== tests"
python -m pytest "$@"
