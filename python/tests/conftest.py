"""What the test modules share: the wheel scripts/package wrote ($SHEEPDOG_PACKAGES, default
target/package), installed offline into one fresh venv per session."""

from __future__ import annotations

import glob
import os
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]
PACKAGES = Path(os.environ.get("SHEEPDOG_PACKAGES", REPO / "target" / "package")).resolve()


@pytest.fixture(scope="session")
def venv():
    wheels = sorted(glob.glob(str(PACKAGES / "sheepdog_cli-*.whl")))
    if not wheels:
        pytest.fail(f"no sheepdog_cli-*.whl in {PACKAGES}: run scripts/package {PACKAGES} first")
    d = Path(tempfile.mkdtemp(prefix="sheepdog-venv-"))
    try:
        subprocess.run([sys.executable, "-m", "venv", str(d)], check=True)
        subprocess.run(
            [str(d / "bin" / "python"), "-m", "pip", "install", "-q", "--no-index", "--disable-pip-version-check", wheels[-1]],
            check=True,
        )
        yield d
    finally:
        shutil.rmtree(d, ignore_errors=True)
