"""The ./xpfo entry script: its venv set-up, when two start at once in a fresh tree."""

import shutil
import subprocess
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent


def test_two_first_runs_at_once_share_one_venv(tmp_path):
    # a tree with the real entry script, no requirements and a harness
    # that only says it ran: what is tested is the set-up, not the harness
    shutil.copy(ROOT / "xpfo", tmp_path / "xpfo")
    (tmp_path / "requirements.txt").write_text("# none\n")
    (tmp_path / "harness").mkdir()
    (tmp_path / "harness" / "__main__.py").write_text("import sys\nprint('ran', sys.argv[1:])\n")

    first = subprocess.Popen([str(tmp_path / "xpfo"), "one"], stdout=subprocess.PIPE,
                             stderr=subprocess.PIPE, text=True)
    assert first.stderr is not None
    # start the second while the first is making its venv
    assert "setting up" in first.stderr.readline()
    second = subprocess.run([str(tmp_path / "xpfo"), "two"], capture_output=True, text=True,
                            timeout=300)
    out, err = first.communicate(timeout=300)

    assert (first.returncode, second.returncode) == (0, 0), err + second.stderr
    assert out == "ran ['one']\n" and second.stdout == "ran ['two']\n"
    # the second waited for the first's venv instead of making its own
    assert "setting up" not in second.stderr
    assert not (tmp_path / ".venv.tmp").exists()
