"""Run README.md's first Python example against the installed libcni (packaging check).

Usage: ``python scripts/readme_example.py REPO``, with the interpreter of the
environment under test. It sets ``CONF_DIR`` (holding docs/index.rst's
``10-mynet.conflist``), ``PLUGIN_DIR`` (the test plugin under the names the
example uses) and ``CACHE_DIR`` as tests/test_docs.py does, checks that
``libcni`` comes from that environment and not from the checkout, and runs
the example. Exit status 0 when it ran.
"""

from __future__ import annotations

import json
import os
import re
import sys
import tempfile
from pathlib import Path

PLUGIN_NAMES = ("bridge", "host-local", "portmap", "tuning", "firewall", "loopback")


def main(repo: Path) -> int:
    import libcni

    where = Path(libcni.__file__).resolve()
    if repo.resolve() in where.parents:
        print(f"readme_example: libcni imported from the checkout ({where})", file=sys.stderr)
        return 1
    readme = (repo / "README.md").read_text(encoding="utf-8")
    example = re.search(r"^```python\n(.*?)^```", readme, re.M | re.S)
    index = (repo / "docs" / "index.rst").read_text(encoding="utf-8")
    conflist = re.search(r"\.\. code-block:: json\n\n((?:      .*\n|\n)+)", index)
    if example is None or conflist is None:
        print("readme_example: example or conflist not found", file=sys.stderr)
        return 1
    with tempfile.TemporaryDirectory(prefix="libcni-readme-") as tmp:
        plugin_dir, conf_dir, cache_dir = (os.path.join(tmp, d) for d in ("bin", "net.d", "cache"))
        for d in (plugin_dir, conf_dir, cache_dir):
            os.mkdir(d)
        for name in PLUGIN_NAMES:
            os.symlink(repo / "tests" / "plugins" / "testplugin", os.path.join(plugin_dir, name))
        with open(os.path.join(conf_dir, "10-mynet.conflist"), "w", encoding="utf-8") as f:
            json.dump(json.loads(conflist.group(1)), f)
        namespace = {
            "__name__": "__readme__",
            "PLUGIN_DIR": plugin_dir,
            "CONF_DIR": conf_dir,
            "CACHE_DIR": cache_dir,
        }
        exec(compile(example.group(1), "README.md", "exec"), namespace)
        if libcni.CNIConfig([plugin_dir], cache_dir=cache_dir).get_cached_attachments():
            print("readme_example: the example left a cache entry", file=sys.stderr)
            return 1
    print(f"readme_example: ran with libcni {libcni.__version__} from {where.parent}")
    return 0


if __name__ == "__main__":
    sys.exit(main(Path(sys.argv[1])))
