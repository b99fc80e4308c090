"""Bad input on the command line: one clear message, non-zero exit."""

import pytest

from harness import build, cli, stress


@pytest.mark.parametrize("argv", [["bogus"], ["boot", "--cpus", "0"], ["boot", "--mode", "nope"],
                                  ["test", "--timeout", "x"], ["series-check", "--from", "0"], []])
def test_bad_command_lines_exit_nonzero(argv, capsys):
    with pytest.raises(SystemExit) as e:
        cli.main(argv)
    assert e.value.code == 2
    assert "usage:" in capsys.readouterr().err


def test_parse_of_missing_log_is_one_clear_error(capsys, tmp_path):
    assert cli.main(["parse", str(tmp_path / "nope.log")]) == 2
    err = capsys.readouterr().err
    assert err.startswith("error: cannot read") and err.count("\n") == 1


def test_parse_judges_a_saved_log(capsys):
    from conftest import DATA
    assert cli.main(["parse", str(DATA / "xpfo_sync.log"), "--mode", "sync"]) == 0
    out = capsys.readouterr().out
    assert "incident bug during lkdtm:XPFO_READ_USER" in out
    assert "PASS XPFO_READ_USER (sync)" in out


@pytest.mark.parametrize("argv", [["stress", "--machine", "bochs-tgl"],
                                  ["selftests", "--machine", "bochs-2cpu"],
                                  ["stress", "--machine", "nosuch"]])
def test_disk_commands_refuse_a_machine_without_a_disk(argv, capsys, monkeypatch):
    # refused before anything is built or booted
    monkeypatch.setattr(build, "ensure_kernel", lambda *a, **kw: pytest.fail("built"))
    assert cli.main(argv) == 2
    err = capsys.readouterr().err
    assert err.count("error:") == 1
    assert "no disk" in err or "has none" in err or "unknown machine" in err


def test_stress_params_reach_the_command_line_and_a_safe_file_name():
    args = cli.parser().parse_args(["stress", "--mode", "strict", "--param", "page_poison=1",
                                    "--param", "a/b=2"])
    assert args.param == ["page_poison=1", "a/b=2"]
    assert stress.command_line("strict", 2, 20, 512, extra=args.param).endswith(
        " --param page_poison=1 --param a/b=2")
    assert stress._suffix(args.param) == "-page_poison-a_b"
