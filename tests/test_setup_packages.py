"""tools/ensure_system_packages.sh: `make demo` asks only for espeak-ng; `make test` also for the browser test's
chromium, chromium-driver and CJK fonts. Run as a non-root user (a fake ``id``) on a PATH where only the
listed tools exist, so nothing is installed."""

from __future__ import annotations

import os
import shutil
import subprocess
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]


def _fake_bin(tmp_path: Path, present: list[str]) -> Path:
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    for tool in ("grep", "bash"):
        os.symlink(shutil.which(tool), bin_dir / tool)
    scripts = {"id": "echo 1000", "dpkg-query": "exit 1"}  # not root; no Debian package installed
    scripts.update({name: "exit 0" for name in present})
    for name, body in scripts.items():
        (bin_dir / name).write_text(f"#!{shutil.which('bash')}\n{body}\n")
        (bin_dir / name).chmod(0o755)
    return bin_dir


@pytest.mark.parametrize("target,present,missing", [
    ("demo", ["espeak-ng"], []),
    ("demo", [], ["espeak-ng"]),
    ("test", ["espeak-ng"], ["chromium", "chromium-driver", "fonts-noto-cjk"]),
    ("test", ["espeak-ng", "chromium", "chromedriver"], ["fonts-noto-cjk"]),
])
def test_each_target_asks_for_its_packages(tmp_path, target, present, missing):
    bin_dir = _fake_bin(tmp_path, present)
    p = subprocess.run([shutil.which("bash"), str(REPO / "tools/ensure_system_packages.sh"), target],
                       env={"PATH": str(bin_dir)}, capture_output=True, text=True, timeout=60)
    assert p.returncode == 0, p.stderr
    if not missing:
        assert p.stderr == ""
        return
    first = p.stderr.splitlines()[0]
    assert first == f"setup: WARNING: missing system package(s) for make {target}: {' '.join(missing)}."


def test_makefile_targets_install_what_they_need():
    make = (REPO / "Makefile").read_text()
    demo = make.split("\ndemo:")[1].split("\n\n")[0]
    test = make.split("\ntest:")[1].split("\n\n")[0]
    assert "ensure_system_packages.sh demo" in demo and "ensure_system_packages.sh test" in test
    assert "ensure_system_packages" not in make.split("\nsetup:")[1].split("\n## ")[0]
