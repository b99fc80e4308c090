import pytest

from harness import config


FRAGMENT = """
# comment
CONFIG_A=y
# CONFIG_B is not set
CONFIG_C="text"
CONFIG_D=64
"""


def test_parse_fragment():
    opts = config.parse(FRAGMENT)
    assert opts["CONFIG_A"].value == "y"
    assert opts["CONFIG_B"].value == "n"
    assert opts["CONFIG_C"].value == '"text"'
    assert str(opts["CONFIG_B"]) == "# CONFIG_B is not set"


def test_parse_rejects_garbage_and_conflicts():
    with pytest.raises(config.ConfigParseError, match="line 2"):
        config.parse("CONFIG_A=y\nthis is not kconfig\n")
    with pytest.raises(config.ConfigParseError, match="given twice"):
        config.parse("CONFIG_A=y\n# CONFIG_A is not set\n")


def test_verify_names_options_that_did_not_take():
    frag = config.parse(FRAGMENT)
    dot = config.parse("CONFIG_A=y\nCONFIG_B=y\nCONFIG_C=\"other\"\n", strict=False)
    bad = {m.wanted.name: m.got for m in config.verify(frag, dot)}
    # B should be off, C has another value, D is missing altogether
    assert bad == {"CONFIG_B": "CONFIG_B=y", "CONFIG_C": 'CONFIG_C="other"',
                   "CONFIG_D": "absent"}


def test_verify_disabled_option_may_be_absent():
    frag = config.parse("# CONFIG_NET is not set\n")
    assert config.verify(frag, config.parse("", strict=False)) == []
    assert config.verify(frag, config.parse("# CONFIG_NET is not set\n", strict=False)) == []


def test_project_fragment_parses():
    from harness.paths import LAYOUT
    opts = config.parse(LAYOUT.fragment.read_text())
    assert opts["CONFIG_XPFO"].value == "y"
    assert opts["CONFIG_LKDTM"].value == "y"
