"""The rule that picks the compaction defaults from the options benchmark (issue 13 §2)."""

from __future__ import annotations

from benchmarks._grader import Grade
from benchmarks.fig_options import Row, choose, variants

from contextfold.context import ContextConfig


def _row(name: str, window: int, costs: list[float], *, kept: int = 9, over: int = 0) -> Row:
    grade = Grade()
    grade.facts = {"paths": 10, "commands": 10, "errors": 10}
    grade.kept = {"paths": kept, "commands": kept, "errors": kept}
    return Row(name, window, costs=costs, over=over, grade=grade)


def test_the_cheapest_variant_that_keeps_retention_and_the_window_wins() -> None:
    rows = {
        16_000: [
            _row("defaults", 16_000, [1.0, 2.0, 3.0]),
            _row("cheaper", 16_000, [1.0, 1.5, 3.0]),
            _row("cheapest but forgets", 16_000, [0.5, 0.5, 0.5], kept=8),
            _row("cheapest but overflows", 16_000, [0.5, 0.5, 0.5], over=1),
        ]
    }
    winner, why = choose(rows, baseline="defaults")
    assert winner == "cheaper"
    assert why == {
        "defaults": "median cost +0.0%, total cost +0.0% against defaults",
        "cheaper": "chosen, median cost -25.0%, total cost -8.3% against defaults",
        "cheapest but forgets": "retention below defaults at 16,000",
        "cheapest but overflows": "calls over the window at 16,000",
    }


def test_a_tie_keeps_the_defaults() -> None:
    rows = {16_000: [_row("defaults", 16_000, [2.0]), _row("same", 16_000, [2.0])]}
    assert choose(rows, baseline="defaults")[0] == "defaults"


def test_a_variant_must_qualify_at_every_window_and_wins_on_its_mean_relative_cost() -> None:
    rows = {
        16_000: [
            _row("defaults", 16_000, [2.0]),
            _row("a", 16_000, [1.0]),  # -50% here, but forgets at 32k
            _row("b", 16_000, [1.8]),  # -10%
        ],
        32_000: [
            _row("defaults", 32_000, [1.0]),
            _row("a", 32_000, [0.5], kept=8),
            _row("b", 32_000, [1.2]),  # +20%: mean +5%
        ],
    }
    winner, why = choose(rows, baseline="defaults")
    assert winner == "defaults"
    assert why["a"] == "retention below defaults at 32,000"
    assert why["b"] == "median cost +5.0%, total cost +5.0% against defaults"


def test_a_tie_on_the_median_goes_to_the_lower_total() -> None:
    # The median run is the same; the variant saves on the runs above it.
    rows = {
        16_000: [
            _row("defaults", 16_000, [1.0, 2.0, 9.0]),
            _row("dearer above the median", 16_000, [1.0, 2.0, 10.0]),
            _row("cheaper above the median", 16_000, [1.0, 2.0, 6.0]),
        ]
    }
    winner, why = choose(rows, baseline="defaults")
    assert winner == "cheaper above the median"
    assert why["cheaper above the median"] == (
        "chosen, median cost +0.0%, total cost -25.0% against defaults"
    )


def test_variants_start_with_the_defaults_and_skip_changes_equal_to_them() -> None:
    found = variants()
    assert found[0] == ("defaults", ContextConfig(tool_result_limit=3000))
    configs = [config for _, config in found]
    assert all(c != configs[0] for c in configs[1:])
    assert len(found) == len({name for name, _ in found})
