"""Release hygiene: one version, complete metadata, and a wheel that works on its own.

The wheel test builds the sdist and the wheel from this tree, installs the wheel (no
dependencies, no index) into a fresh virtual environment whose only other packages are
the test environment's (added after its own site-packages, so the wheel's contextfold is
the one imported), and there imports every module of the package, runs the console
script, and reads the data files the demo and the replay need.
"""

from __future__ import annotations

import importlib.metadata
import importlib.util
import json
import os
import subprocess
import sys
import sysconfig
import tarfile
import tomllib
import zipfile
from pathlib import Path

import pytest

import contextfold

ROOT = Path(__file__).resolve().parents[1]
PROJECT = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]
SOURCE = ROOT / "src" / "contextfold"


def test_the_version_comes_from_one_place() -> None:
    assert "version" not in PROJECT.get("dynamic", [])
    assert contextfold.__version__ == importlib.metadata.version("contextfold")
    assert contextfold.__version__ == PROJECT["version"]
    # The package does not repeat the number: it reads the installed distribution's.
    assert PROJECT["version"] not in (SOURCE / "__init__.py").read_text()


def test_the_metadata_is_complete() -> None:
    assert PROJECT["license"] == "Apache-2.0"
    assert PROJECT["readme"] == "README.md"
    assert PROJECT["requires-python"] == ">=3.11"
    classifiers = PROJECT["classifiers"]
    assert "Typing :: Typed" in classifiers
    assert "Programming Language :: Python :: 3.11" in classifiers
    assert PROJECT["description"]
    assert PROJECT["keywords"]
    assert (SOURCE / "py.typed").is_file()
    changelog = (ROOT / "CHANGELOG.md").read_text()
    assert "## [Unreleased]" in changelog
    assert f"## [{PROJECT['version']}]" in changelog


def source_modules() -> set[str]:
    return {
        ".".join(path.relative_to(SOURCE.parent).with_suffix("").parts).removesuffix(".__init__")
        for path in SOURCE.rglob("*.py")
    }


def source_data() -> set[str]:
    tracked = subprocess.run(
        ["git", "ls-files", "src/contextfold"], cwd=ROOT, capture_output=True, text=True
    )
    if tracked.returncode != 0:
        pytest.skip("not a git checkout: cannot tell which data files are shipped")
    return {
        name.removeprefix("src/")
        for name in tracked.stdout.splitlines()
        if not name.endswith((".py", ".orig", ".rej"))
    }


def test_the_wheel_installs_and_imports_in_a_fresh_venv(tmp_path: Path) -> None:
    pytest.importorskip("build", reason="needs the build package (the dev extra)")
    isolation = [] if importlib.util.find_spec("hatchling") is None else ["--no-isolation"]
    dist = tmp_path / "dist"
    built = subprocess.run(
        [sys.executable, "-m", "build", *isolation, "--outdir", str(dist), str(ROOT)],
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert built.returncode == 0, built.stderr[-3000:]
    (wheel,) = dist.glob("contextfold-*.whl")
    (sdist,) = dist.glob("contextfold-*.tar.gz")
    assert wheel.name.startswith(f"contextfold-{PROJECT['version']}-")
    assert sdist.name == f"contextfold-{PROJECT['version']}.tar.gz"

    names = set(zipfile.ZipFile(wheel).namelist())
    shipped = {n.removesuffix(".py").replace("/", ".") for n in names if n.endswith(".py")}
    assert {m.replace(".__init__", "") for m in shipped} | shipped >= source_modules()
    assert source_data() <= names, source_data() - names
    assert "contextfold/py.typed" in names
    # The license text travels with the wheel and the sdist.
    assert any(n.endswith(".dist-info/licenses/LICENSE") for n in names), sorted(names)[-8:]
    with tarfile.open(sdist) as archive:
        assert f"contextfold-{PROJECT['version']}/LICENSE" in archive.getnames()
    assert not [n for n in names if n.endswith((".orig", ".rej", ".pyc"))]

    venv = tmp_path / "venv"
    # No pip in the venv (ensurepip took 3.5 s of this test): this environment's pip
    # installs into it (``--python``).
    subprocess.run(
        [sys.executable, "-m", "venv", "--without-pip", str(venv)], check=True, timeout=120
    )
    python = venv / "bin" / "python"
    purelib = subprocess.run(
        [str(python), "-c", "import sysconfig; print(sysconfig.get_paths()['purelib'])"],
        capture_output=True,
        text=True,
        check=True,
    ).stdout.strip()
    # The dependencies: this environment's packages, after the venv's own.
    (Path(purelib) / "test_environment.pth").write_text(sysconfig.get_paths()["purelib"] + "\n")
    installed = subprocess.run(
        [
            *(sys.executable, "-m", "pip", "--python", str(python), "install", "-q"),
            *("--no-deps", "--no-index", str(wheel)),
        ],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert installed.returncode == 0, installed.stderr[-3000:]

    check = r"""
import importlib, importlib.metadata, importlib.resources, json, pkgutil, sys
import contextfold
from contextfold import MissingDependencyError
failed, missing = [], []
for info in pkgutil.walk_packages(contextfold.__path__, "contextfold."):
    if info.name.endswith(".__main__"):  # runs the command line when imported
        continue
    try:
        importlib.import_module(info.name)
    except MissingDependencyError as exc:
        missing.append(f"{info.name}: {exc}")
    except Exception as exc:
        failed.append(f"{info.name}: {exc!r}")
demo = importlib.resources.files("contextfold.cli") / "demo_data"
pricing = importlib.resources.files("contextfold.replay") / "pricing.json"
print(json.dumps({
    "file": contextfold.__file__,
    "version": contextfold.__version__,
    "dist": importlib.metadata.version("contextfold"),
    "modules": sorted(sys.modules),
    "failed": failed,
    "missing": missing,
    "typed": (importlib.resources.files("contextfold") / "py.typed").is_file(),
    "demo_runs": sorted(p.name for p in demo.iterdir() if p.name.endswith(".traj.json")),
    "pricing": bool(json.loads(pricing.read_text())),
}))
"""
    clean = {k: v for k, v in os.environ.items() if not k.startswith("PYTHON")}
    ran = subprocess.run(
        [str(python), "-c", check],
        capture_output=True,
        text=True,
        timeout=300,
        cwd=tmp_path,
        env=clean,
    )
    assert ran.returncode == 0, ran.stderr[-3000:]
    seen = json.loads(ran.stdout)
    assert seen["file"].startswith(str(venv)), seen["file"]  # the wheel's, not this tree's
    assert seen["version"] == seen["dist"] == PROJECT["version"]
    assert seen["failed"] == []
    assert seen["typed"]
    assert len(seen["demo_runs"]) == 3
    assert seen["pricing"]
    imported = {m for m in seen["modules"] if m.startswith("contextfold")}
    skipped = {line.split(":")[0] for line in seen["missing"]}
    mains = {m for m in source_modules() if m.endswith(".__main__")}
    assert source_modules() - mains - imported - skipped == set()

    script = subprocess.run(
        [str(venv / "bin" / "contextfold"), "--help"],
        capture_output=True,
        text=True,
        timeout=120,
        env=clean,
    )
    assert script.returncode == 0, script.stderr[-2000:]
    assert "demo" in script.stdout
