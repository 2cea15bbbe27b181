"""The scheduling hints .ci/test relies on still name real files of the model lane, and
its lanes collect every test they run (tests/lanes.py)."""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.conftest import LONGEST_FIRST
from tests.lanes import BALANCING, MODEL_MARK, SERIAL_MARK, lane_files, outside_their_lane

ROOT = Path(__file__).parents[1]


@pytest.mark.parametrize("path", LONGEST_FIRST)
def test_each_longest_first_file_exists_and_runs_the_model(path: str) -> None:
    text = (ROOT / path).read_text()
    assert any(name in text for name in ("llama_server", "demo_run", "local_model")), path


def test_the_model_lane_keeps_the_collection_order() -> None:
    script = (ROOT / ".ci" / "test").read_text()
    lane = script.split("CONTEXTFOLD_TEST_PIN_WORKERS=1", 1)[1].split("&\n", 1)[0]
    assert "--no-loadscope-reorder" in lane
    assert '-m "model and not serial"' in lane


@pytest.mark.parametrize("path", BALANCING)
def test_each_balancing_file_exists_and_starts_no_process(path: str) -> None:
    """Pinned to one CPU in the model lane, a file that started processes or servers of
    its own would share that CPU with them."""
    text = (ROOT / path).read_text()
    assert "subprocess" not in text, path
    assert "multiprocessing" not in text, path


def test_a_lane_mark_that_the_file_does_not_spell_out_is_refused(
    pytester: pytest.Pytester,
) -> None:
    """A `serial` mark made without the words, and a model fixture reached through another
    fixture: the lanes would not collect those files, and the check says so."""
    pytester.makeconftest(
        "import pytest\n"
        "@pytest.fixture\n"
        "def llama_server(): return 'url'\n"
        "@pytest.fixture\n"
        "def indirect(llama_server): return llama_server\n"
        "def pytest_collection_modifyitems(items):\n"
        "    for item in items:\n"
        "        if 'llama_server' in item.fixturenames:\n"
        "            item.add_marker(pytest.mark.model)\n"
    )
    tests = pytester.mkdir("tests")
    files = {
        "test_hidden.py": "import pytest\n"
        "pytestmark = getattr(pytest.mark, 'ser' + 'ial')\n"
        "def test_timed(): pass\n",
        "test_spelled.py": f"import pytest\n@{SERIAL_MARK}\ndef test_timed(): pass\n"
        "def test_other(): pass\n",
        "test_indirect.py": "def test_on_the_model(indirect): pass\n",
        "test_direct.py": "def test_on_the_model(llama_server): pass\n",
        "test_marked.py": f"import pytest\n@{MODEL_MARK}\ndef test_starts_the_model(): pass\n",
    }
    for name, text in files.items():
        (tests / name).write_text(text)
    items, _ = pytester.inline_genitems("-p", "no:cacheprovider", "-W", "ignore")
    assert len(items) == 6
    problems = outside_their_lane(items)
    assert [p.split(" ", 1)[0] for p in problems] == [
        "tests/test_hidden.py::test_timed",
        "tests/test_indirect.py::test_on_the_model",
    ], problems
    assert lane_files("serial", pytester.path) == ["tests/test_spelled.py"]
    assert lane_files("model", pytester.path) == ["tests/test_direct.py", "tests/test_marked.py"]


def test_each_lane_lists_the_files_of_its_tests() -> None:
    serial, model = lane_files("serial"), lane_files("model")
    assert "tests/reliability/test_rel_resume.py" in serial
    assert set(LONGEST_FIRST) | set(BALANCING) <= set(model)
