"""Failures reach the user as one 'error:' line, never a traceback."""

import subprocess

import pytest

from harness import cli, errors


def test_failed_external_command_is_one_error_line(monkeypatch, capsys):
    def boom(args):
        subprocess.run(["sh", "-c", "echo noise; echo 'fatal: not a git repository' >&2; "
                        "exit 128"], check=True, capture_output=True, text=True)

    monkeypatch.setattr(cli, "cmd_export", boom)
    assert cli.main(["export"]) == 2
    err = capsys.readouterr().err
    assert "Traceback" not in err
    first, hint = err.splitlines()
    assert first.startswith("error: command failed (exit status 128): sh -c ")
    assert first.endswith(": fatal: not a git repository")
    assert hint.startswith("  hint: ")


@pytest.mark.parametrize("e, text", [
    (subprocess.CalledProcessError(2, ["make", "-C", "a b"]),
     "command failed (exit status 2): make -C 'a b'"),
    (subprocess.CalledProcessError(-9, "qemu", output=b"last\n\n"),
     "command failed (killed by signal 9): qemu: last"),
])
def test_called_process_error_message(e, text):
    assert errors.from_called_process(e).what == text
