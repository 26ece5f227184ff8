#!/usr/bin/env bash
# Packaging check (run by scripts/test.sh, hence by CI): build the sdist and,
# from it, the wheel; install the wheel into a fresh virtual environment; run
# `libcni --version` and the README's example there. A file missing from the
# package, a wrong entry point or a missing dependency fails here.
# Usage: scripts/check_package.sh [PYTHON]   (default: .venv/bin/python)
set -euo pipefail
cd "$(dirname "$0")/.."
repo="$PWD"
python="${1:-.venv/bin/python}"
work="$(mktemp -d "${TMPDIR:-/tmp}/libcni-package.XXXXXX")"
trap 'rm -rf "$work"' EXIT

echo "== package: build"
# No flags: the sdist first, then the wheel built from the unpacked sdist.
"$python" -m build --outdir "$work/dist" . >"$work/build.log" 2>&1 || { cat "$work/build.log" >&2; exit 1; }
version="$("$python" -c 'import libcni; print(libcni.__version__)')"
sdist="$work/dist/libcni-$version.tar.gz"
wheel="$work/dist/libcni-$version-py3-none-any.whl"
for f in "$sdist" "$wheel"; do
    [ -f "$f" ] || { echo "package: $f was not built" >&2; ls -l "$work/dist" >&2; exit 1; }
done
"$python" - "$sdist" "$wheel" "$version" <<'PY'
import sys, tarfile, zipfile
sdist, wheel, version = sys.argv[1:]
names = tarfile.open(sdist).getnames()
prefix = f"libcni-{version}/"
for need in ("LICENSE", "README.md", "pyproject.toml", "CHANGELOG.md", "libcni/py.typed"):
    assert prefix + need in names, f"sdist lacks {need}"
wnames = zipfile.ZipFile(wheel).namelist()
for need in ("libcni/__init__.py", "libcni/py.typed", "libcni/testing.py",
             f"libcni-{version}.dist-info/licenses/LICENSE"):
    assert need in wnames, f"wheel lacks {need}"
meta = zipfile.ZipFile(wheel).read(f"libcni-{version}.dist-info/METADATA").decode()
for need in ("License-Expression: Apache-2.0", "Requires-Dist: platformdirs",
             "Provides-Extra: prometheus", "Provides-Extra: otel",
             "Classifier: Programming Language :: Python :: 3.13", "Project-URL:"):
    assert need in meta, f"wheel metadata lacks {need!r}"
assert not [n for n in wnames if n.startswith("tests/")], "tests packaged in the wheel"
assert not [n for n in wnames if "demo" in n], "the demo packaged in the wheel (examples/demo.py)"
PY

echo "== package: install the wheel into a fresh virtual environment"
"$python" -m venv "$work/venv"
"$work/venv/bin/python" -m pip install -q --disable-pip-version-check "$wheel" \
    >"$work/pip.log" 2>&1 || { cat "$work/pip.log" >&2; exit 1; }

echo "== package: libcni --version; the README example"
cd "$work"   # not the checkout: libcni must come from the fresh environment
out="$("$work/venv/bin/libcni" --version)"
[ "$out" = "libcni $version" ] || { echo "package: libcni --version printed '$out'" >&2; exit 1; }
"$work/venv/bin/python" "$repo/scripts/readme_example.py" "$repo"
