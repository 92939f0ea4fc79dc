"""Rules on hand-made blocks: each holds exactly where its documented thresholds say."""

from __future__ import annotations

import numpy as np
import pytest
import torch
from torch import nn
from torch.nn import functional as F

from xray_tb import HealthOptions, Xray, open_run
from xray_tb.health.rules import RULES, Rule, RuleInput, make_rules
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


class _RaisingRule(Rule):
    """A rule with a bug: its check raises on every block."""

    name = "raising"

    def check(self, block):
        raise RuntimeError("rule bug")

    def message(self, hit):
        return ""


def _hooks(model) -> dict:
    return {name: (dict(m._forward_hooks), dict(m._forward_pre_hooks), dict(m._backward_hooks))
            for name, m in model.named_modules() if m._forward_hooks or m._forward_pre_hooks or m._backward_hooks}


def test_a_rule_that_raises_costs_its_own_findings_only_and_close_removes_every_hook(tmp_path, monkeypatch):
    """Statistics, frames and the other rules' findings are written; one warning names the rule and how to
    switch it off; close() succeeds and leaves no hook (a rule added to RULES, as the package's own are)."""
    monkeypatch.setitem(RULES, _RaisingRule.name, _RaisingRule)
    torch.manual_seed(0)
    model = nn.Sequential(nn.Linear(8, 16), nn.ReLU(), nn.Linear(16, 3))
    optimizer = torch.optim.SGD(model.parameters(), lr=0.01)
    before = _hooks(model)
    xray = Xray(model, input_size=(8,), logdir=str(tmp_path), every=10, health=HealthOptions(every=1))
    g = torch.Generator().manual_seed(0)
    with pytest.warns(UserWarning, match=r"finding rule 'raising' failed \(RuntimeError: rule bug\).*rules=\{'raising': False\}") as caught:
        for step in range(30):
            if step == 25:  # a nonfinite finding, from another rule
                with torch.no_grad():
                    model[2].weight[0, 0] = float("nan")
            optimizer.zero_grad()
            F.cross_entropy(model(torch.randn(16, 8, generator=g)), torch.randint(0, 3, (16,), generator=g)).backward()
            xray.take_graphs()
            optimizer.step()
        xray.close()
    assert sum("finding rule 'raising'" in str(w.message) for w in caught) == 1
    assert _hooks(model) == before
    run = open_run(tmp_path)
    _, steps, _ = run.health("grad_l2")
    assert steps.tolist() == list(range(30))  # every measured iteration written
    assert run.records() and [(f.rule, f.layer, f.step) for f in run.findings() if f.rule == "nonfinite"] == [("nonfinite", "2", 25)]


def test_a_closer_that_raises_still_lets_every_hook_go_and_the_event_file_close(tmp_path):
    torch.manual_seed(0)
    model = nn.Sequential(nn.Linear(8, 16), nn.ReLU(), nn.Linear(16, 3))
    before = _hooks(model)
    xray = Xray(model, input_size=(8,), logdir=str(tmp_path), every=1)
    model(torch.randn(4, 8)).sum().backward()
    xray.take_graphs()

    def broken():
        raise RuntimeError("closer bug")

    xray._recording.on_release(broken)
    with pytest.raises(RuntimeError, match="closer bug"):
        xray.close()
    assert _hooks(model) == before
    assert open_run(tmp_path).records()
    xray.close()  # again: nothing left to do


def test_a_rule_is_one_new_module_of_the_rules_package(tmp_path, monkeypatch):
    """A module holding a Rule subclass with a name is found after the built-in rules, which keep their order."""
    import sys

    from xray_tb.health import rules as package

    (tmp_path / "loss_of_signal.py").write_text(
        "from xray_tb.health.rules.base import Rule\n\n"
        "class LossOfSignalRule(Rule):\n"
        "    name = 'loss_of_signal'\n\n"
        "    def check(self, block):\n"
        "        return []\n")
    monkeypatch.setattr(package, "__path__", [*package.__path__, str(tmp_path)])
    monkeypatch.delitem(sys.modules, "xray_tb.health.rules.loss_of_signal", raising=False)
    found = [rule.name for rule in package._found_rules()]
    assert found == ["loss_of_signal"]
    assert list(RULES)[:7] == ["dead_units", "vanishing_gradient", "zero_gradient", "exploding_gradient", "saturation",
                               "update_ratio", "nonfinite"]
    sys.modules.pop("xray_tb.health.rules.loss_of_signal", None)
