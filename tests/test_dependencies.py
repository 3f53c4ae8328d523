"""What `odradek serve` imports is installed by `pip install odradek`: the README's first
command (`make serve`: scripts/bootstrap installs the package without extras) ran into a
broker that imported `cryptography` (the password encoder of dynamic configs, issue 49),
which only the test and TLS extras installed; the test venv has every extra, so no other
test saw it.

The broker's imports are taken in a fresh interpreter (the modules `odradek serve` loads
before it serves) and mapped to the distributions that provide them; each must be a
dependency of the package itself (pyproject.toml's ``[project] dependencies``)."""

from __future__ import annotations

import json
import re
import subprocess
import sys
import tomllib
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]

_PROBE = """
import sys
before = set(sys.modules)  # the interpreter's start (site's .pth files) is not the broker's
import importlib.metadata, json
import odradek.cli.main, odradek.server.broker
provided = importlib.metadata.packages_distributions()
top = {name.split(".")[0] for name in set(sys.modules) - before}
print(json.dumps(sorted({d for name in top if name not in sys.stdlib_module_names
                          for d in provided.get(name, ())})))
"""


def _name(requirement: str) -> str:
    """A requirement's distribution name, normalised (PEP 503)."""
    match = re.match(r"[A-Za-z0-9][A-Za-z0-9._-]*", requirement)
    assert match is not None, requirement
    return re.sub(r"[-_.]+", "-", match.group(0)).lower()


def test_the_brokers_imports_are_the_packages_own_dependencies() -> None:
    project = tomllib.loads((REPO / "pyproject.toml").read_text())["project"]
    declared = {_name(r) for r in project["dependencies"]}
    out = subprocess.run([sys.executable, "-c", _PROBE], capture_output=True, text=True,
                         check=True, cwd=REPO)
    imported = {_name(d) for d in json.loads(out.stdout)} - {"odradek"}
    # what the declared dependencies bring in themselves is theirs to declare
    from importlib.metadata import requires

    brought: set[str] = set()
    for dist in declared:
        brought |= {_name(r) for r in (requires(dist) or []) if "extra ==" not in r}
    missing = sorted(imported - declared - brought)
    assert missing == [], (
        f"`odradek serve` imports {missing}, which `pip install odradek` does not install")
