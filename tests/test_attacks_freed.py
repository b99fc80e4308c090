"""XPFO_READ_FREED and XPFO_SMP on real captured logs (sync and batched, 2 vCPUs)."""

from harness import attacks, console
from conftest import DATA

FREED = "lkdtm:XPFO_READ_FREED"


def _text(name: str) -> str:
    return (DATA / name).read_text()


def _judge(text: str, mode: str, test: str = "XPFO_READ_FREED") -> attacks.Verdict:
    return attacks.judge_read(console.parse(text.splitlines()), f"lkdtm:{test}", test, mode,
                              cleared_stops=test == "XPFO_READ_FREED")


def test_sync_clears_the_freed_frame():
    v = _judge(_text("attacks_sync_2cpu.log"), "sync")
    assert v.passed and "cleared" in v.detail, v.detail


def test_a_read_of_the_payload_is_not_stopped():
    text = _text("attacks_sync_2cpu.log")
    wrote = next(line.split("user wrote ")[1].split(",")[0] for line in text.splitlines()
                 if "XPFO_READ_FREED: user wrote" in line)
    bad = text.replace("XPFO_READ_FREED: read 0x0 ", f"XPFO_READ_FREED: read {wrote} ")
    v = _judge(bad, "sync")
    assert not v.passed and "NOT STOPPED" in v.detail, v.detail


def test_a_nonzero_read_without_the_cleared_line_is_not_stopped():
    text = _text("attacks_sync_2cpu.log").replace("the payload is gone from the freed frame", "")
    v = _judge(text, "sync")
    assert not v.passed, v.detail


def test_batch_keeps_the_freed_frame_unmapped():
    v = _judge(_text("attacks_batch_2cpu.log"), "batched")
    assert v.passed and "XPFO oops" in v.detail, v.detail


def test_smp_in_batch_is_a_by_design_window():
    v = _judge(_text("attacks_batch_2cpu.log"), "batched", "XPFO_SMP")
    assert v.passed and v.detail.startswith(("XFAIL", "XPASS")), v.detail
    # the same read in sync mode would be a failure
    v = _judge(_text("attacks_batch_2cpu.log"), "sync", "XPFO_SMP")
    assert not v.passed
