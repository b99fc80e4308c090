"""predict in the harness: both sides of the reuse measure, per size."""

import json
from typing import Optional

from harness import attacks, console


def _con(result: Optional[dict], ended: bool = True) -> console.Console:
    step = attacks.PREDICT_STEP
    lines = ["KTAP version 1", "1..1", f"# XH-STEP-BEGIN {step}"]
    if result is not None:
        lines.append(f"XH-RESULT {step} " + json.dumps({"predict": result}))
    if ended:
        lines += [f"ok 1 {step}", "# XH-DONE"]
    return console.parse(lines)


def _result(same4k: int, same64k: int, same2m: int, other: int) -> dict:
    return {"reuse_trials": 1000, "reuse_same": same4k, "mthp_trials": 1000,
            "mthp_same": same64k, "mthp_small": 0, "thp_trials": 200, "thp_same": same2m,
            "thp_small": 0, "spray_pages": 4096, "spray_adjacent": 30,
            "mthp_other": {"16": {"trials": 200, "same": other, "small": 0},
                           "1024": {"trials": 200, "same": other, "small": 0}}}


def test_strict_passes_at_chance_and_fails_when_the_block_comes_back():
    v = attacks.judge_predict(_con(_result(0, 0, 3, 1)), "strict")
    assert [x.test for x in v] == ["PREDICT[4K]", "PREDICT[64K]", "PREDICT[2M]",
                                   "PREDICT[16K]", "PREDICT[1024K]"]
    assert all(x.passed for x in v), v
    # the series before the random pick: every 64K block came back
    v = attacks.judge_predict(_con(_result(0, 1000, 38, 200)), "strict+pgt-batched")
    bad = {x.test: x.detail for x in v if not x.passed}
    assert set(bad) == {"PREDICT[64K]", "PREDICT[2M]", "PREDICT[16K]", "PREDICT[1024K]"}
    assert bad["PREDICT[64K]"].startswith("PREDICTABLE: the block just freed came back in 1000")
    # 2M: 38 of 200 is 19%, over the 5% limit
    v = attacks.judge_predict(_con(_result(0, 40, 38, 0)), "strict")
    assert [x.test for x in v if not x.passed] == ["PREDICT[2M]"]


def test_off_must_show_the_reuse_it_measures():
    v = attacks.judge_predict(_con(_result(1000, 1000, 200, 200)), "off")
    assert all(x.passed for x in v), v
    assert [x.detail.startswith("attack works") for x in v[:3]] == [True, False, True], v
    v = attacks.judge_predict(_con(_result(0, 1000, 200, 200)), "off")
    assert [x.test for x in v if not x.passed] == ["PREDICT[4K]"]
    v = attacks.judge_predict(_con(_result(1000, 1000, 0, 200)), "off")
    assert [x.test for x in v if not x.passed] == ["PREDICT[2M]"]
    # 64K with XPFO off: reported (a freed mTHP folio can sit in an LRU
    # batched past the next fault: 0 of 1000 seen once)
    v = attacks.judge_predict(_con(_result(1000, 0, 200, 200)), "off")
    assert all(x.passed for x in v) and "reported" in v[1].detail
    # the other mTHP sizes are reported, not judged, with XPFO off
    v = attacks.judge_predict(_con(_result(1000, 1000, 200, 0)), "off")
    assert all(x.passed for x in v) and "reported" in v[-1].detail


def test_too_few_large_folios_or_no_report_fails():
    r = _result(0, 0, 0, 0)
    r["thp_trials"], r["thp_small"] = 20, 200
    v = attacks.judge_predict(_con(r), "strict")
    assert [x.test for x in v if not x.passed] == ["PREDICT[2M]"]
    assert not attacks.judge_predict(_con(None), "strict")[0].passed
    assert not attacks.judge_predict(_con(_result(0, 0, 0, 0), ended=False), "strict")[0].passed
    r = _result(0, 0, 0, 0)
    r["mthp_other"] = {}
    assert not all(x.passed for x in attacks.judge_predict(_con(r), "strict"))


def test_predict_runs_in_off_and_strict_only():
    assert attacks.predict_runs("off") and attacks.predict_runs("strict")
    assert attacks.predict_runs("strict+pgt-batched")
    assert not attacks.predict_runs("sync") and not attacks.predict_runs("batched")
