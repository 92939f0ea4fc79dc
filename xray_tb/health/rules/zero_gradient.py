"""``zero_gradient``: a layer's gradient exactly zero on ``patience`` consecutive measured iterations.

Where ``vanishing_gradient`` compares layers with each other, this one needs no comparison, so it holds
when every layer's gradient is zero too: a network whose units all died, a loss detached from the
model, a layer frozen out of the loss. The value is the layer's ``grad_l2`` (0).
"""

from __future__ import annotations


from xray_tb.health.findings import Hit
from xray_tb.health.rules.base import Rule, RuleInput, Streaks, first_hits


class ZeroGradientRule(Rule):
    name = "zero_gradient"
    defaults = {"patience": 5}

    def __init__(self, **settings):
        super().__init__(**settings)
        self._streaks = Streaks()
        self._seen: set = set()

    def check(self, block: RuleInput) -> list[Hit]:
        norms = block.stats.get("grad_l2")
        if norms is None or not norms.size:
            return []
        zero = norms == 0  # a NaN (never measured) is not zero, and breaks the streak
        runs = self._streaks.update(zero)
        return first_hits(runs >= self.settings["patience"], block.steps, block.layers, norms, self._seen)

    def message(self, hit: Hit) -> str:
        return (
            f"{hit.layer}'s gradient is exactly zero, sustained: it does not learn. Common causes: every unit after it "
            "is dead (see the dead_units findings; lower the learning rate), the loss does not depend on it (a "
            "detach() or an unused branch), or its output is cut by a mask"
        )
