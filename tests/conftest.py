import os
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
DATA = Path(__file__).resolve().parent / "test_data"


def pytest_collection_modifyitems(config: pytest.Config, items: list) -> None:
    """XPFO_SKIP_INTEGRATION=1: an alias of -m "not integration"."""
    if os.environ.get("XPFO_SKIP_INTEGRATION") != "1":
        return
    keep = [i for i in items if i.get_closest_marker("integration") is None]
    config.hook.pytest_deselected(items=[i for i in items if i not in keep])
    items[:] = keep
