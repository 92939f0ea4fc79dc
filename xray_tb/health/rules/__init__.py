"""Finding rules, one module each. ``RULES`` lists them; ``make_rules`` builds them with a run's settings."""

from __future__ import annotations

from typing import Any, Mapping

from xray_tb.health.rules.base import Rule, RuleInput, unknown_names
from xray_tb.health.rules.dead_units import DeadUnitsRule
from xray_tb.health.rules.exploding_gradient import ExplodingGradientRule
from xray_tb.health.rules.nonfinite import NonFiniteRule
from xray_tb.health.rules.saturation import SaturationRule
from xray_tb.health.rules.update_ratio import UpdateRatioRule
from xray_tb.health.rules.vanishing_gradient import VanishingGradientRule
from xray_tb.health.rules.zero_gradient import ZeroGradientRule

RULES: dict[str, type[Rule]] = {
    rule.name: rule for rule in (DeadUnitsRule, VanishingGradientRule, ZeroGradientRule, ExplodingGradientRule, SaturationRule, UpdateRatioRule,
                                NonFiniteRule)
}


def make_rules(settings: Mapping[str, Any], dead_window: int) -> list[Rule]:
    """The rules, with ``settings`` ``{rule: {setting: value} or False}`` applied."""
    unknown = sorted(set(settings) - set(RULES))
    if unknown:
        raise ValueError(f"HealthOptions(rules=...) names unknown rules {unknown_names(unknown, RULES)}; the rules: {', '.join(RULES)}")
    rules = []
    for name, rule in RULES.items():
        given = settings.get(name, {})
        if given is False:
            continue
        if not isinstance(given, Mapping):
            raise ValueError(f"HealthOptions(rules={{{name!r}: ...}}) takes a dict of settings or False, got {given!r}")
        rules.append(rule(window=dead_window, **given) if rule is DeadUnitsRule else rule(**given))
    return rules


__all__ = ["RULES", "Rule", "RuleInput", "make_rules"]
