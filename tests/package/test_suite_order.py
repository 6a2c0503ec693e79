"""The test suite's file order (tests/conftest.py, HEAVY_FIRST): every file it names exists, so a
renamed or removed file cannot drop out of the order unnoticed."""
from pathlib import Path

import conftest

TESTS = Path(__file__).resolve().parents[1]


def test_heavy_first_names_existing_test_files():
    missing = [name for name in conftest.HEAVY_FIRST if not (TESTS / name).is_file()]
    assert not missing, f"tests/conftest.py HEAVY_FIRST names files that do not exist: {missing}"
    assert list(conftest.HEAVY_FIRST.values()) == sorted(conftest.HEAVY_FIRST.values(), reverse=True)
