"""The `serial` phase of .ci/test collects only the files that say ``pytest.mark.serial``;
the collection hook refuses a `serial` test in any other file, which would never run."""

from __future__ import annotations

import pytest

from .conftest import SERIAL_MARK, serial_tests_outside_listed_files


def test_a_serial_mark_the_file_does_not_spell_out_is_found(pytester: pytest.Pytester) -> None:
    pytester.makepyfile(
        test_hidden=(
            "import pytest\n"
            "pytestmark = getattr(pytest.mark, 'ser' + 'ial')\n"
            "def test_timed(): pass\n"
        ),
        test_spelled=(
            f"import pytest\n@{SERIAL_MARK}\ndef test_timed(): pass\ndef test_other(): pass\n"
        ),
    )
    items, _ = pytester.inline_genitems("-p", "no:cacheprovider", "-W", "ignore")
    serial = [item.nodeid for item in items if item.get_closest_marker("serial")]
    assert sorted(serial) == ["test_hidden.py::test_timed", "test_spelled.py::test_timed"]
    assert serial_tests_outside_listed_files(items) == ["test_hidden.py::test_timed"]
