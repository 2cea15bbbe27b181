"""Artifact ledger and summarizer transcript: deterministic extraction, ranking, budget."""

from __future__ import annotations

from hypothesis import given, settings
from hypothesis import strategies as st

from contextfold.context._facts import (
    LedgerKind,
    command_lines,
    extract_ledger,
    outline,
    shell_lines,
)
from contextfold.context._ledger import ArtifactLedger
from contextfold.context._summarizer import transcript_entry
from contextfold.message import Msg, TextBlock, ToolCallBlock, ToolResultBlock
from contextfold.token import OpenAITokenCounter

from .ctx_support import call, results, user

COUNTER = OpenAITokenCounter()


def of(kind: LedgerKind, found: list[tuple[LedgerKind, str]]) -> list[str]:
    return [text for k, text in found if k == kind]


def bash(command: str, output: str, *, n: int, returncode: int = 0) -> list[Msg]:
    call_ = ToolCallBlock(id=f"c{n}", name="bash", input={"command": command})
    result = ToolResultBlock(
        id=f"c{n}",
        name="bash",
        output=output,
        is_error=returncode != 0,
        metadata={"returncode": returncode},
    )
    return [Msg("a", [call_], "assistant"), Msg("tool", [result], "user")]


def test_ledger_extracts_paths_commands_errors_and_symbols() -> None:
    asst = Msg(
        "a",
        [
            TextBlock(text="Edit `parse_header()` in requests/utils.py"),
            ToolCallBlock(id="c1", name="bash", input={"command": "python -m pytest tests/"}),
        ],
        "assistant",
    )
    msgs = [
        user("The bug is in /repo/src/app/models.py line 40"),
        asst,
        results(asst, "E   KeyError: 'content-length'\ndef prepare_body(self, data):\n"),
    ]
    found = extract_ledger(msgs)
    assert "/repo/src/app/models.py" in of("file", found)
    assert "requests/utils.py" in of("file", found)
    assert of("command", found) == ["[ok] python -m pytest tests/"]
    assert of("error", found) == ["E KeyError: 'content-length'"]
    assert of("symbol", found) == ["prepare_body"]


def test_commands_carry_their_exit_status_and_heredoc_bodies_in_outline_on_demand() -> None:
    script = (
        "cat <<'EOF' > repro.py\nimport sys\nx = 1\ny = 2\nprint(x | y)\nEOF\n"
        "python repro.py && echo ok"
    )
    found = extract_ledger([*bash(script, "Traceback ...\nValueError: bad", n=1, returncode=1)])
    assert of("command", found) == [f"[1] {script}"]
    assert outline(of("command", found)[0]) == (
        "[1] cat <<'EOF' > repro.py\n[4 heredoc lines]\nEOF\npython repro.py && echo ok"
    )
    assert of("error", found) == ["ValueError: bad"]


def test_shell_lines_skip_every_kind_of_heredoc() -> None:
    command = 'cat <<EOF >a\nx\nEOF\ncat <<-"END" >b\n\ty\n\tEND\ntail -n 3 a'
    assert shell_lines(command) == ["cat <<EOF >a", 'cat <<-"END" >b', "tail -n 3 a"]


def test_the_users_constraints_and_identifiers_are_kept() -> None:
    found = extract_ledger(
        [user("Cancel reservation ZFA04Y for mia_li_3668. You must not change the tests.")]
    )
    assert of("constraint", found) == ["You must not change the tests."]
    assert {"ZFA04Y", "mia_li_3668"} <= set(of("identifier", found))


def test_ledger_is_deterministic() -> None:
    msgs = [user("see a/b.py and c/d.py; ValueError: x"), user("a/b.py again")]
    assert extract_ledger(msgs) == extract_ledger(msgs)
    assert of("file", extract_ledger(msgs)) == ["a/b.py", "c/d.py", "a/b.py"]


def test_merge_counts_uses_and_the_latest_compaction() -> None:
    first = ArtifactLedger().merge([("file", "a.py"), ("file", "b.py"), ("file", "a.py")])
    second = first.merge([("file", "c.py"), ("file", "b.py")])
    by_text = {e.text: e for e in second.entries}
    assert (by_text["a.py"].uses, by_text["a.py"].last) == (1, 1)  # once per compaction
    assert (by_text["b.py"].uses, by_text["b.py"].last) == (2, 2)
    assert second.compactions == 2
    assert [e.text for e in second.entries] == ["a.py", "c.py", "b.py"]  # last seen last


def test_selection_keeps_the_latest_compaction_first_then_the_most_used() -> None:
    old = ArtifactLedger().merge([("file", f"old/f{i}.py") for i in range(200)])
    new = old.merge([("file", "new/hot.py"), ("file", "new/cold.py")])
    chosen = new.select(COUNTER, budget=60)
    texts = [e.text for e in chosen.entries]
    assert {"new/hot.py", "new/cold.py"} <= set(texts)
    assert len(texts) < 201


def test_the_files_a_command_or_an_editing_tool_changes_are_edits() -> None:
    found = extract_ledger(
        [
            *bash("sed -i 's/a/b/' django/db/backends/oracle/operations.py", "", n=1),
            *bash("cat > repro.py <<'EOF'\nprint(open('notes.txt').read())\nEOF", "", n=2),
            *bash("echo x >> setup.cfg 2>/dev/null && ls src/pkg/__init__.py", "", n=3),
            *bash("python - | tee out.log; mv build/a.whl dist/a.whl; cp -r x y/z", "", n=4),
            *bash("cat README.rst; grep -n foo src/app.py > /dev/null", "", n=5),
            Msg(
                "a",
                [
                    ToolCallBlock(id="e1", name="Edit", input={"file_path": "/repo/m.py"}),
                    ToolCallBlock(
                        id="e2",
                        name="str_replace_editor",
                        input={"command": "view", "path": "/repo/only_read.py"},
                    ),
                ],
                "assistant",
            ),
        ]
    )
    assert of("edit", found) == [
        "django/db/backends/oracle/operations.py",
        "repro.py",
        "setup.cfg",
        "out.log",
        "dist/a.whl",
        "y/z",
        "/repo/m.py",
    ]
    # Read or listed, not changed: README.rst, src/app.py, src/pkg/__init__.py, notes.txt.
    assert "src/pkg/__init__.py" in of("file", found)


def test_files_changed_and_errors_met_outrank_what_was_only_read() -> None:
    ledger = ArtifactLedger().merge(
        [
            ("edit", "django/db/backends/oracle/operations.py"),
            ("error", "TypeError: bad operand"),
        ]
    )
    for n in range(6):  # later compactions that only read files
        ledger = ledger.merge([("file", f"read/f{n}_{i}.py") for i in range(40)])
    chosen = ledger.select(COUNTER, budget=80)
    texts = [e.text for e in chosen.entries]
    assert "django/db/backends/oracle/operations.py" in texts
    assert "TypeError: bad operand" in texts
    assert "read/f5_39.py" in texts  # the newest reads fill the rest
    rendered = chosen.render()
    assert "Files changed: django/db/backends/oracle/operations.py" in rendered


@settings(max_examples=60, deadline=None)
@given(
    items=st.lists(
        st.tuples(
            st.sampled_from(
                ["command", "edit", "file", "error", "symbol", "identifier", "constraint"]
            ),
            st.text(min_size=1, max_size=80),
        ),
        max_size=120,
    ),
    budget=st.integers(min_value=40, max_value=1500),
)
def test_a_selected_ledger_renders_within_its_budget(
    items: list[tuple[LedgerKind, str]], budget: int
) -> None:
    ledger = ArtifactLedger().merge(items).select(COUNTER, budget)
    assert COUNTER.count_text(ledger.render()) <= budget


def test_chained_compactions_keep_the_ledger_bounded() -> None:
    ledger = ArtifactLedger()
    sizes = []
    for compaction in range(1, 8):
        span = []
        for i in range(40):
            n = compaction * 100 + i
            span += bash(
                f"grep -n 'def f{n}' src/pkg/mod_{n}.py",
                f"src/pkg/mod_{n}.py:{n}: def f{n}():\nAssertionError: case {n}",
                n=n,
                returncode=i % 2,
            )
        ledger = ledger.merge(extract_ledger(span)).select(COUNTER, budget=1600)
        sizes.append(COUNTER.count_text(ledger.render()))
    assert max(sizes) <= 1600
    assert sizes[4] <= 1.2 * sizes[1]


def test_empty_ledger_renders_nothing() -> None:
    assert ArtifactLedger().render() == ""


def test_files_inside_a_rendered_command_are_not_listed_twice() -> None:
    ledger = ArtifactLedger().merge([("command", "[0] cat src/a.py"), ("file", "src/a.py")])
    assert ledger.render().count("src/a.py") == 1


def test_facts_the_fields_state_are_not_repeated_but_commands_are() -> None:
    ledger = ArtifactLedger().merge(
        [
            ("command", "[1] pytest tests"),
            ("file", "src/a.py"),
            ("file", "a.py"),
            ("error", "ValueError: bad x"),
            ("identifier", "mask_id"),
        ]
    )
    said = "Ran pytest tests; edited src/a.py and src/data.py. ValueError: bad x"
    text = ledger.render(said)
    assert "[1] pytest tests" in text  # the exit status is the ledger's own
    assert "src/a.py" not in text
    assert "ValueError: bad x" not in text
    assert "a.py" in text.replace("src/a.py", "")  # inside a longer path is no statement
    assert "mask_id" in text
    assert ledger.render() != text


def test_a_fact_cut_from_a_field_comes_back_in_the_ledger() -> None:
    from contextfold.context import ContextConfig
    from contextfold.context._summary import compose_summary

    ledger = ArtifactLedger().merge([("file", "src/deep/late.py")])

    def composed(state: str) -> str:
        fields = {"task_overview": "fix it", "current_state": state}
        return compose_summary(
            fields,
            config=ContextConfig(),
            counter=COUNTER,
            size=4000,
            ledger=ledger,
            ref=None,
            compressed=3,
        )

    assert composed("edited src/deep/late.py").count("src/deep/late.py") == 1
    long_state = " ".join(f"w{i}" for i in range(4000)) + " src/deep/late.py"
    assert "src/deep/late.py" in composed(long_state)


def test_transcript_shows_tool_traffic_as_text() -> None:
    asst = call("read", text="reading")
    entry = transcript_entry(asst)
    call_id = asst.tool_calls[0].id
    assert entry == f'[assistant assistant]\nreading\n(tool call {call_id}: read) {{"arg": "read"}}'
    result = transcript_entry(results(asst, "file body"))
    assert result == f"[user tool]\n(tool result {call_id}: read) file body"


def test_ledger_error_is_the_whole_line_holding_the_marker_once() -> None:
    text = "ok\n  at step 3 FAILED with ValueError: bad\nnext\nTraceback (most recent call last)"
    assert of("error", extract_ledger([user(text)])) == ["at step 3 FAILED with ValueError: bad"]


def test_ledger_keyword_inside_a_word_is_no_definition_but_the_next_one_is() -> None:
    assert of("symbol", extract_ledger([user("undef class Foo: and xfn bar()")])) == ["Foo"]


def test_prose_naming_a_keyword_is_no_definition() -> None:
    prose = "The class is defined below; this function returns early; a struct of three."
    assert of("symbol", extract_ledger([user(prose)])) == []
    code = (
        "class Foo(Base):\nclass Bar {\nclass Baz extends Qux {\n    def run(self):\n"
        "fn parse<T>(x: T)\nfunction go() {\nstruct Point;\ninterface Shape<T> {\nclass End"
    )
    assert of("symbol", extract_ledger([user(code)])) == [
        "Foo",
        "Bar",
        "Baz",
        "run",
        "parse",
        "go",
        "Point",
        "Shape",
        "End",
    ]


def test_a_ratio_of_numbers_is_no_path() -> None:
    text = "thresholds -0.05/0.055 and 1/2.5, in src/v2/a.py and build/pkg-1.2.tar.gz"
    assert of("file", extract_ledger([user(text)])) == ["src/v2/a.py", "build/pkg-1.2.tar.gz"]


def test_ledger_paths_keep_their_edges_across_whitespace_and_punctuation() -> None:
    text = "see (src/a.py) and\tlib/b/c.txt:12, not http://x.org/y.html; file d.json."
    assert of("file", extract_ledger([user(text)])) == ["src/a.py", "lib/b/c.txt:12", "d.json"]


def test_urls_are_not_files() -> None:
    assert of("file", extract_ledger([user("see https://example.com/a/b.html")])) == []


@settings(max_examples=50, deadline=None)
@given(
    sizes=st.lists(st.integers(min_value=0, max_value=3000), min_size=5, max_size=5),
    window=st.sampled_from([2560, 8000, 16_000, 128_000]),
)
def test_a_composed_summary_fits_its_budget_and_keeps_what_the_engine_adds(
    sizes: list[int], window: int
) -> None:
    from contextfold.context import ContextConfig
    from contextfold.context._layer import summary_budget
    from contextfold.context._summary import compose_summary

    config = ContextConfig()
    names = ["task_overview", "current_state", "important_discoveries", "next_steps", "ctp"]
    fields = {
        n: " ".join(f"w{i}" for i in range(size)) for n, size in zip(names, sizes, strict=True)
    }
    fields["context_to_preserve"] = fields.pop("ctp")
    ledger = ArtifactLedger().merge([("file", f"src/m{i}.py") for i in range(50)])
    ledger = ledger.select(COUNTER, int(0.1 * window))
    text = compose_summary(
        fields,
        config=config,
        counter=COUNTER,
        size=window,
        ledger=ledger,
        ref="sessions/s/context.jsonl",
        compressed=10,
    )
    assert COUNTER.count_text(text) <= summary_budget(config, window)
    assert "saved in 'sessions/s/context.jsonl'" in text
    assert ledger.render() in text
    assert text.endswith("</system-reminder>")


def _collapsed(text: str) -> str:
    return " ".join(text.split())


def test_a_multi_line_command_is_listed_as_typed_with_heredoc_bodies() -> None:
    # Joined with " ; " the model saw commands it never typed; a heredoc's text is written
    # out (counted when the ledger lacks room), and what follows the terminator stays.
    typed = "git checkout src/a.py\npytest -c /dev/null tests/test_a.py"
    script = "cat <<'EOF' > repro.py\nimport sys\na = 1\nb = 2\nprint(a, b)\nEOF\npython repro.py"
    found = [*bash(typed, "ok", n=1), *bash(script, "1", n=2)]
    text = ArtifactLedger().merge(extract_ledger(found)).render()
    assert "- [0] git checkout src/a.py\n  pytest -c /dev/null tests/test_a.py" in text
    assert _collapsed(typed) in _collapsed(text)
    assert (
        "- [0] cat <<'EOF' > repro.py\n  import sys\n  a = 1\n  b = 2\n  print(a, b)\n  EOF\n"
        in text
    )


def test_a_command_run_again_is_listed_once_with_its_statuses_and_runs() -> None:
    runs = [
        *bash("pytest tests/test_a.py", "FAILED", n=1, returncode=1),
        *bash("pytest tests/test_a.py", "FAILED", n=2, returncode=1),
    ]
    ledger = ArtifactLedger().merge(extract_ledger(runs))
    ledger = ledger.merge(extract_ledger(bash("pytest tests/test_a.py", "passed", n=3)))
    commands = [e for e in ledger.entries if e.kind == "command"]
    assert [e.text for e in commands] == ["[1, 0] pytest tests/test_a.py"]
    assert "- [1, 0] pytest tests/test_a.py (run 3 times)" in ledger.render()


def test_a_command_written_out_and_then_run_is_one_run() -> None:
    written = Msg("a", [TextBlock(text="```bash\nls src\n```")], "assistant")
    ledger = ArtifactLedger().merge(extract_ledger([written, *bash("ls src", "a.py", n=1)]))
    assert [(e.text, e.count) for e in ledger.entries if e.kind == "command"] == [("[0] ls src", 1)]


def test_commands_left_out_are_counted_and_the_model_told_where_they_are() -> None:
    span = [m for n in range(60) for m in bash(f"sed -n '{n},{n + 9}p' src/mod.py", "x", n=n)]
    ledger = ArtifactLedger().merge(extract_ledger(span)).select(COUNTER, budget=300)
    shown = [e for e in ledger.entries if e.kind == "command"]
    assert 0 < len(shown) < 60
    assert ledger.dropped == 60 - len(shown)
    text = ledger.render()
    assert f"({60 - len(shown)} earlier commands left out: Search the saved messages" in text
    assert f"({60 - len(shown)} earlier commands left out)" in ledger.render(readback=False)
    assert "Search" not in ledger.render(readback=False)
    assert COUNTER.count_text(text) <= 300
    # The count carries over the next compaction.
    again = ledger.merge(extract_ledger(bash("ls", "x", n=99))).select(COUNTER, budget=300)
    assert again.dropped >= ledger.dropped


def test_errors_do_not_crowd_the_commands_out() -> None:
    # One failing test run lists fifty ERROR lines; errors rank first, so uncapped they
    # took the whole budget and the commands went (astropy-8707 at 16k).
    log = "\n".join(f"ERROR tests/test_h.py::T::test_case_{n}" for n in range(80))
    span = [*bash("pytest tests/test_h.py", log, n=1, returncode=1)]
    span += [m for n in range(2, 12) for m in bash(f"grep -n f{n} src/m.py", "x", n=n)]
    ledger = ArtifactLedger().merge(extract_ledger(span)).select(COUNTER, budget=1200)
    assert len([e for e in ledger.entries if e.kind == "command"]) == 11


def test_facts_the_kept_user_messages_state_are_not_listed_again() -> None:
    task = "Fix parse_header in src/pkg/header.py. You must not modify tests."
    found = extract_ledger([user(task), *bash("cat src/pkg/header.py", "x", n=1)])
    unstated = ArtifactLedger().merge(found).select(COUNTER, budget=800)
    assert {"constraint", "identifier"} <= {e.kind for e in unstated.entries}
    ledger = ArtifactLedger().merge(found).select(COUNTER, budget=800, stated=task)
    assert not {"constraint", "identifier"} & {e.kind for e in ledger.entries}
    assert [e.text for e in ledger.entries if e.kind == "command"] == ["[0] cat src/pkg/header.py"]


def test_a_short_heredoc_body_is_kept_as_written() -> None:
    # Counting two short lines costs about what they do: the model sees what it wrote.
    short = "cat <<'EOF' > setup.cfg\n[flake8]\nmax-line-length = 100\nEOF"
    found = extract_ledger(bash(short, "", n=1))
    assert of("command", found) == [
        "[0] cat <<'EOF' > setup.cfg\n[flake8]\nmax-line-length = 100\nEOF"
    ]


def test_files_a_listed_command_shows_cost_no_room_of_their_own() -> None:
    # The rendering leaves out a file a listed command already shows; selection charged
    # it anyway, and a later mention of the files (ranked first: more recent) took the
    # room of the commands that show them.
    span = [
        m for n in range(30) for m in bash(f"grep -n value_{n} src/pkg/module_{n}.py", "x", n=n)
    ]
    ledger = ArtifactLedger().merge(extract_ledger(span))
    mention = " ".join(f"src/pkg/module_{n}.py" for n in range(30))
    ledger = ledger.merge(extract_ledger([Msg("a", [TextBlock(text=mention)], "assistant")]))
    budget = COUNTER.count_text(ledger.render()) + 40
    chosen = ledger.select(COUNTER, budget)
    assert len([e for e in chosen.entries if e.kind == "command"]) == 30
    assert COUNTER.count_text(chosen.render()) <= budget


def test_a_heredoc_body_is_listed_as_written_while_there_is_room() -> None:
    # A file the agent wrote through a heredoc is its work: counting its lines lost it
    # from every later request (about 165 commands of the 44 runs at 16k).
    script = (
        "cat <<'EOF' > repro.py\nimport sys\n\ndef main():\n    print(sys.argv)\n"
        "    return 0\nEOF\npython repro.py"
    )
    ledger = ArtifactLedger().merge(extract_ledger(bash(script, "[]", n=1))).select(COUNTER, 400)
    text = ledger.render()
    assert "  import sys\n  def main():\n      print(sys.argv)\n      return 0\n  EOF" in text
    assert _collapsed(script) in _collapsed(text)


def test_heredoc_bodies_are_outlined_oldest_first_when_room_is_short() -> None:
    def script(name: str) -> str:
        body = "\n".join(f"    value_{name}_{i} = compute({i})" for i in range(12))
        return f"cat <<'EOF' > {name}.py\ndef f():\n{body}\nEOF\npython {name}.py"

    ledger = ArtifactLedger().merge(extract_ledger(bash(script("old"), "", n=1)))
    ledger = ledger.merge(extract_ledger(bash(script("new"), "", n=2)))
    whole = COUNTER.count_text(ledger.render())
    chosen = ledger.select(COUNTER, whole - 60)
    text = chosen.render()
    assert _collapsed(script("new")) in _collapsed(text)
    assert "cat <<'EOF' > old.py\n  [13 heredoc lines]\n  EOF\n  python old.py" in text
    assert len([e for e in chosen.entries if e.kind == "command"]) == 2
    assert COUNTER.count_text(text) <= whole - 60


def test_a_parts_outlined_command_stays_outlined_in_the_layers_ledger() -> None:
    # The layer's ledger measures the room left for the next part by rendering what the
    # parts list: a body a part outlined, rendered whole there, left too little room.
    from contextfold.context._summary import part_ledger

    body = "\n".join(f"    value_{i} = compute({i})" for i in range(30))
    script = f"cat <<'EOF' > gen.py\ndef f():\n{body}\nEOF\npython gen.py"
    earlier = ArtifactLedger().merge(extract_ledger(bash("ls src", "a.py", n=1)))
    found = extract_ledger(bash(script, "", n=2))
    rewrite = earlier.merge(found).select(COUNTER, 120)
    got = part_ledger(earlier, found, COUNTER, 120, rewrite=rewrite)
    assert got is not None
    new, layer = got
    assert "[31 heredoc lines]" in new.render()
    assert "[31 heredoc lines]" in layer.render()


def test_the_commands_run_outrank_what_later_compactions_only_read_or_named() -> None:
    # A command is the record of a step (and names the files and functions it touched);
    # ranked by recency with the rest, each later compaction's file and function names
    # pushed the earlier commands out at the next rewrite (pytest-6197 at 16k lost 24).
    span = [m for n in range(8) for m in bash(f"sed -n '{n}0,{n}9p' src/mod.py", "x", n=n)]
    ledger = ArtifactLedger().merge(extract_ledger(span))
    for n in range(6):  # later compactions that only name files and functions
        ledger = ledger.merge(
            [("file", f"read/f{n}_{i}.py") for i in range(20)]
            + [("symbol", f"helper_{n}_{i}") for i in range(10)]
        )
    commands = ArtifactLedger(entries=[e for e in ledger.entries if e.kind == "command"])
    chosen = ledger.select(COUNTER, budget=COUNTER.count_text(commands.render()) + 60)
    assert len([e for e in chosen.entries if e.kind == "command"]) == 8
    assert "read/f5_19.py" in [e.text for e in chosen.entries]  # the newest fill the rest


def test_a_long_command_line_is_listed_whole_while_there_is_room() -> None:
    # A one-line sed inserting a function runs past 600 characters: cut there at
    # extraction, it was lost from every later request whatever the room.
    body = "\\n".join(f"    value_{i} = compute({i})" for i in range(60))
    command = f"sed -i '12i\\{body}' src/pkg/module.py"
    assert len(command) > 900
    ledger = ArtifactLedger().merge(extract_ledger(bash(command, "", n=1)))
    assert _collapsed(command) in _collapsed(ledger.select(COUNTER, 1200).render())
    short = ledger.select(COUNTER, 400)
    text = short.render()
    assert _collapsed(command) not in _collapsed(text)
    assert "sed -i '12i" in text
    assert COUNTER.count_text(text) <= 400


def test_a_heredoc_body_outranks_files_only_read() -> None:
    # The body a heredoc wrote is the agent's work; the files it only read (traceback
    # locations, a later ``ls``) are context. Bodies came back only in the room the files
    # left, so the written files of the long runs were outlined and lost (django-16950 at
    # 16k lost 6 of its heredocs that way).
    body = "\n".join(f"    value_{i} = compute({i})" for i in range(20))
    script = f"cat <<'EOF' > repro.py\ndef f():\n{body}\nEOF\npython repro.py"
    ledger = ArtifactLedger().merge(extract_ledger(bash(script, "", n=1)))
    ledger = ledger.merge([("file", f"/testbed/pkg/read_{i}.py:{i}") for i in range(40)])
    whole = ArtifactLedger(entries=[e for e in ledger.entries if e.kind == "command"])
    chosen = ledger.select(COUNTER, COUNTER.count_text(whole.render()) + 60)
    text = chosen.render()
    assert _collapsed(script) in _collapsed(text)
    assert "[21 heredoc lines]" not in text
    assert any(e.kind == "file" for e in chosen.entries)  # the files fill what is left


def test_an_inline_script_is_outlined_like_a_heredoc_body() -> None:
    # ``python3 -c '...'`` over many lines is written code, as a heredoc's body is; it
    # was never outlined, so listed whole it took the room of several shorter commands.
    code = "\n".join(f"value_{i} = compute({i}, 'a longer argument')" for i in range(8))
    script = f"python3 -c '\nimport sys\n{code}\n' < src/pkg/module.py"
    listed = of("command", extract_ledger(bash(script, "", n=1)))[0]
    assert outline(listed) == "[0] python3 -c '\n[9 script lines]\n' < src/pkg/module.py"
    # A few short lines typed one after the other stay as they are.
    short = "[0] cd src\nls -la\npytest -q tests/test_a.py\ngit status"
    assert outline(short) == short


def test_short_bodies_come_back_before_a_long_newer_one() -> None:
    # Restored newest first, one long body (a whole file rewritten) took the room of two
    # short scripts written before it: one command listed whole where two could be.
    def script(name: str, lines: int) -> str:
        body = "\n".join(f"    value_{name}_{i} = compute({i})" for i in range(lines))
        return f"cat <<'EOF' > {name}.py\ndef f():\n{body}\nEOF\npython {name}.py"

    def extra(text: str) -> int:  # what listing the body costs beyond its outline
        alone = ArtifactLedger().merge(extract_ledger(bash(text, "", n=9)))
        return COUNTER.count_text(alone.render()) - COUNTER.count_text(
            alone.select(COUNTER, 120).render()
        )

    one, two, big = script("one", 6), script("two", 6), script("big", 16)
    shorts = extra(one) + extra(two)
    assert shorts < extra(big) < shorts + extra(one)  # room for the long one or both short
    ledger = ArtifactLedger()
    for n, text in enumerate((one, two, big)):
        ledger = ledger.merge(extract_ledger(bash(text, "", n=n)))
    outlined = ledger.select(COUNTER, 200)
    assert outlined.render().count("heredoc lines]") == 3
    # Room for the long body alone (selection counts a little more than it renders).
    budget = COUNTER.count_text(outlined.render()) + extra(big) + 40
    text = ledger.select(COUNTER, budget).render()
    assert _collapsed(one) in _collapsed(text)
    assert _collapsed(two) in _collapsed(text)
    assert "[17 heredoc lines]" in text
    assert COUNTER.count_text(text) <= budget


def test_command_lines_keep_the_whitespace_the_agent_typed() -> None:
    """A command is kept to be read again and run again: spaces inside a line (Python
    inserted by ``sed``, fixed-width text in a heredoc) and indentation are part of it.
    Collapsing them kept 69 of the 1,088 graded commands of the whole-run benchmark in a
    form that no longer ran as typed (astropy-8707: ``sed -i '351i\\        if ...'``)."""
    sed = (
        "sed -i '351i\\        if isinstance(data, bytes):"
        "\\n            data = data.decode()' io.py"
    )
    script = (
        "cat <<'EOF' > card.py\n"
        "CARD = 'NAXIS   =                    2 / number of axes'\n"
        "def f():\n"
        "\tif x:\n"
        "\t    return 1\n"
        "EOF\n"
        "python -c 'import card\n"
        "for i in range(2):\n"
        "    print(i,  card.CARD)'"
    )
    assert command_lines(sed) == [sed]
    assert command_lines(script) == [line for line in script.splitlines() if line.strip()]
