"""Finding rules, one module each. ``RULES`` lists them; ``make_rules`` builds them with a run's settings.

Adding a rule is one new module here holding a :class:`~xray_tb.health.rules.base.Rule` subclass with
its ``name``: it is found at import, after the built-in ones (whose order is kept), in module order.
"""

from __future__ import annotations

import importlib
import inspect
import pkgutil
from typing import Any, Mapping

from xray_tb.health.rules.base import Rule, RuleInput, unknown_names
from xray_tb.health.rules.dead_units import DeadUnitsRule
from xray_tb.health.rules.exploding_gradient import ExplodingGradientRule
from xray_tb.health.rules.nonfinite import NonFiniteRule
from xray_tb.health.rules.saturation import SaturationRule
from xray_tb.health.rules.update_ratio import UpdateRatioRule
from xray_tb.health.rules.vanishing_gradient import VanishingGradientRule
from xray_tb.health.rules.zero_gradient import ZeroGradientRule

_BUILT_IN = (DeadUnitsRule, VanishingGradientRule, ZeroGradientRule, ExplodingGradientRule, SaturationRule, UpdateRatioRule,
             NonFiniteRule)


def _found_rules() -> list[type[Rule]]:
    """The Rule subclasses (with a name) that the package's other modules define, in module order."""
    found = []
    for module_info in sorted(pkgutil.iter_modules(__path__), key=lambda m: m.name):
        if module_info.name == "base":
            continue
        module = importlib.import_module(f"{__name__}.{module_info.name}")
        found += [rule for _, rule in inspect.getmembers(module, inspect.isclass)
                  if issubclass(rule, Rule) and rule.__module__ == module.__name__ and rule.name and rule not in _BUILT_IN]
    return found


RULES: dict[str, type[Rule]] = {rule.name: rule for rule in (*_BUILT_IN, *_found_rules())}


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
