import json
import os
import sys
from pathlib import Path
from typing import List, Optional, Tuple

import pytest

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
DATA = Path(__file__).resolve().parent / "test_data"

from harness import machines  # noqa: E402  (needs ROOT on sys.path)

# One guest boot of an integration test: what it runs ("attacks", "stress",
# ...), the machine kind, the mode (None: the kernel's defaults or no mode of
# modes.ALL_MODES) and its vCPUs.
Boot = Tuple[str, str, Optional[str], int]


def pytest_addoption(parser: pytest.Parser) -> None:
    group = parser.getgroup("xpfo", "xpfo's suite (docs/TESTING.md)")
    group.addoption("--full", action="store_true",
                    help="also run the long suites, the tests marked 'full' (the mm "
                         "selftests, the stress boot in the modes beyond the default's): "
                         "./xpfo check --full")
    group.addoption("--boots-json", metavar="PATH",
                    help="after collection, write each selected test with what it boots "
                         "(its 'boots' marker: machine kind, mode, vCPUs) to PATH as JSON")


def pytest_report_header(config: pytest.Config) -> str:
    if config.getoption("full"):
        return "xpfo: --full: the long suites (marker 'full') included"
    return "xpfo: the long suites (marker 'full') left out: ./xpfo check --full runs them"


def boots(item: pytest.Item) -> List[Boot]:
    """What an integration test boots, from its `boots` marker:
    ``boots(SUITE, machine=KIND, modes=(MODE, ...), cpus=N)``. A parametrized
    test's own `machine` and `mode` (or `run_mode`) arguments stand for the
    marker's; the machine defaults to machines.DEFAULT, the vCPUs are what
    the kind gives for `cpus` (a Bochs kind's are fixed)."""
    marker = item.get_closest_marker("boots")
    if marker is None:
        return []
    callspec = getattr(item, "callspec", None)
    params = callspec.params if callspec is not None else {}
    machine = params.get("machine", marker.kwargs.get("machine", machines.DEFAULT))
    mode = params.get("mode", params.get("run_mode"))
    run_modes = [mode] if mode is not None else list(marker.kwargs.get("modes", [None]))
    cpus = machines.get(machine).vcpus(marker.kwargs.get("cpus", 1))
    return [(marker.args[0], machine, m, cpus) for m in run_modes]


def pytest_collection_modifyitems(config: pytest.Config, items: list) -> None:
    """Without --full, the tests marked 'full' are deselected.
    XPFO_SKIP_INTEGRATION=1: an alias of -m "not integration"."""
    drop = []
    for i in items:
        if os.environ.get("XPFO_SKIP_INTEGRATION") == "1" and i.get_closest_marker("integration"):
            drop.append(i)
        elif not config.getoption("full") and i.get_closest_marker("full"):
            drop.append(i)
    if drop:
        config.hook.pytest_deselected(items=drop)
        items[:] = [i for i in items if i not in drop]


def pytest_collection_finish(session: pytest.Session) -> None:
    path = session.config.getoption("boots_json")
    if not path:
        return
    Path(path).write_text(json.dumps([
        {"test": i.nodeid, "full": i.get_closest_marker("full") is not None,
         "integration": i.get_closest_marker("integration") is not None,
         "fixtures": list(getattr(i, "fixturenames", [])), "boots": boots(i)}
        for i in session.items], indent=1) + "\n")
