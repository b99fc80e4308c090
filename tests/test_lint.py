"""Static checks, as the kernel's kunit tool runs them (run_checks.py):
ruff on the harness and its tests, mypy on the harness. Configured by
ruff.toml and mypy.ini at the top of the repository."""

import os
import subprocess
import sys

import pytest

from conftest import ROOT


def _run(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", *args], cwd=ROOT, capture_output=True,
                          text=True)


def test_ruff():
    r = _run("ruff", "check", "--no-cache", "harness", "tests")
    assert r.returncode == 0, r.stdout + r.stderr


def test_mypy():
    r = _run("mypy", "--no-incremental", "--cache-dir", os.devnull)
    assert r.returncode == 0, r.stdout + r.stderr


@pytest.mark.parametrize("how", [["-m", "not integration"], []])
def test_integration_tests_can_be_deselected(how):
    env = dict(os.environ)
    env.pop("XPFO_SKIP_INTEGRATION", None)
    if not how:
        env["XPFO_SKIP_INTEGRATION"] = "1"   # the old way, kept as an alias
    r = subprocess.run([sys.executable, "-m", "pytest", "--collect-only", "-q",
                        "-p", "no:cacheprovider", *how, "tests/test_integration.py"],
                       cwd=ROOT, env=env, capture_output=True, text=True)
    assert "deselected" in r.stdout and "test_integration.py::" not in r.stdout, r.stdout


def test_requirements_are_used():
    reqs = (ROOT / "requirements.txt").read_text().lower()
    assert "pyparsing" not in reqs   # matplotlib brings its own; nothing imports it
    # checkpatch's spdxcheck.py passes every tag when it cannot import these
    assert "gitpython" in reqs and "ply" in reqs
