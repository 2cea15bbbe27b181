"""The retention grader's own rules, on fixed inputs (it grades the library, so it is tested
without it)."""

from __future__ import annotations

from benchmarks._data import Session, Step
from benchmarks._grader import SentRequest, commands_of, error_lines_of, grade, paths_of


def test_commands_are_the_first_lines_of_each_chained_piece_without_heredoc_bodies() -> None:
    command = (
        "cd /testbed && cat <<'EOF' > repro.py\nimport a | b\nEOF\npython repro.py | head -n 5; ls"
    )
    assert commands_of(command) == ["cd /testbed", "cat <<'EOF' > repro.py", "head -n 5"]


def test_paths_are_words_with_a_slash_or_an_extension() -> None:
    command = "sed -n '10,20p' src/app/main.py > out.txt && python -m pytest --rootdir=/testbed -q"
    assert paths_of(command) == ["src/app/main.py", "out.txt", "/testbed"]


def test_urls_options_and_numbers_are_not_paths() -> None:
    assert paths_of("curl https://example.com/x.json -o 1.5 --verbose") == []


def test_error_lines_are_traceback_exception_lines() -> None:
    output = (
        "<returncode>1</returncode>\nTraceback (most recent call last):\n"
        '  File "a.py", line 3, in <module>\n    f()\n'
        "django.core.exceptions.AppRegistryNotReady: Apps aren't loaded yet.\n"
        'Traceback (most recent call last):\n  File "b.py", line 1\n</output_head>\n'
    )
    assert error_lines_of(output) == [
        "django.core.exceptions.AppRegistryNotReady: Apps aren't loaded yet."
    ]


def _session() -> Session:
    steps = [
        Step("", "cat src/a.py", "ok"),
        Step("", "grep -n x src/b.py", "Traceback (most recent call last):\nValueError: bad"),
        Step("", "ls tests", "ok"),
        Step("", "pytest -q tests/test_c.py", "ok"),
    ]
    return Session("s", "system", "task", steps)


def test_a_compression_grades_the_facts_of_the_steps_that_left() -> None:
    before = "cat src/a.py grep -n x src/b.py ValueError: bad ls tests"
    requests = [
        SentRequest(step=3, summary="", rest=before, kept_steps=3),
        # Steps 0 and 1 left: their facts are looked up in this request's summary.
        SentRequest(
            step=4,
            summary="ran cat src/a.py and saw ValueError: bad",
            rest="ls tests pytest -q tests/test_c.py src/b.py",
            kept_steps=2,
            summary_tokens=100,
        ),
    ]
    result = grade(_session(), requests, window=1000)
    assert result.compressions == 1
    assert result.facts == {"paths": 2, "commands": 2, "errors": 1}
    assert result.kept == {"paths": 1, "commands": 1, "errors": 1}
    assert result.elsewhere == {"paths": 1, "commands": 0, "errors": 0}  # src/b.py is kept
    assert result.rate("commands") == 0.5  # "grep -n x src/b.py" is lost
    assert result.summary_share == [0.1]


def test_facts_the_model_never_saw_are_not_graded() -> None:
    requests = [
        SentRequest(step=2, summary="", rest="cat src/a.py", kept_steps=2),
        SentRequest(step=3, summary="cat src/a.py", rest="", kept_steps=1),
    ]
    # Step 1 was no longer in the request before the compression (say, cut away by
    # truncation): its command, path and error line are unseen, not lost.
    result = grade(_session(), requests, window=1000)
    assert result.unseen == {"paths": 1, "commands": 1, "errors": 1}
    assert result.facts["commands"] == 1
    assert result.kept["commands"] == 1
