"""Rules on hand-made blocks: each holds exactly where its documented thresholds say."""

from __future__ import annotations

import numpy as np

from xray_tb.health.rules import RuleInput, make_rules
from xray_tb.health.rules.base import streaks
from xray_tb.health.rules.update_ratio import UpdateRatioRule


def block(**stats) -> RuleInput:
    steps = np.arange(len(next(iter(stats.values()))))
    return RuleInput(steps, ["a", "b"], stats, np.array([4.0, 4.0]), np.zeros(0, np.int64), [], {}, None)


def test_streaks_continue_across_blocks():
    flags = np.array([[1, 0], [1, 1], [0, 1], [1, 1]], dtype=bool)
    np.testing.assert_array_equal(streaks(flags, np.array([2, 0])), [[3, 0], [4, 1], [0, 2], [1, 3]])


def test_update_ratio_holds_on_the_median_of_the_last_window_measured_values():
    rule = UpdateRatioRule(window=3, high=0.1, low=1e-6)
    ratios = np.full((12, 2), np.nan)
    ratios[::2, 0] = [1e-3, 0.5, 0.5, 1e-3, 1e-3, 1e-3]  # medians over 3: 0.5 at index 2 (step 4), 0.5 at step 6
    ratios[::2, 1] = 1e-3
    hits = rule.check(block(update_ratio=ratios[:6]))
    assert [(h.layer, h.step, h.value) for h in hits] == [("a", 4, 0.5)]
    hits = rule.check(block(update_ratio=ratios[6:]))  # the window carries over: step 6 of the block = row 0
    assert [(h.layer, h.step, h.value) for h in hits] == [("a", 0, 0.5)]


def test_exploding_holds_past_the_bound_or_on_fast_growth():
    rules = {rule.name: rule for rule in make_rules({"exploding_gradient": {"window": 3, "growth": 10.0, "max_norm": 1e3}}, 1)}
    norms = np.array([[1.0, 1.0], [1.0, 1.0], [1.0, 1.0], [5.0, 11.0], [2e3, 1.0]])
    hits = rules["exploding_gradient"].check(block(grad_l2=norms))
    assert sorted((h.layer, h.step, h.value) for h in hits) == [("a", 4, 2e3), ("b", 3, 11.0)]
