"""The statistic families a health monitor measures, built from its scope and options, and the one way
in for a user's own (:meth:`Families.add`)."""

from __future__ import annotations

from tb_plugin import health_metadata
from xray_tb.capture.shared_reductions import SharedReductions
from xray_tb.health.options import HealthOptions
from xray_tb.health.scope import Scope
from xray_tb.health.stats import (
    ActivationStatistic, ChannelVariance, DeadUnits, ForwardChecks, GradientStatistics,
    IterationStatistic, Saturation, Statistic, UpdateRatio, WeightNorm,
)


class Families:
    """The built-in families and those added: ``iteration`` ones reduce the weights and gradients on
    measured iterations, ``activation`` ones the activations kept at health steps, and ``checks`` look
    for non-finite outputs at health steps."""

    def __init__(self, scope: Scope, options: HealthOptions, reductions: SharedReductions):
        weighted = [layer.name for layer in scope.weighted]
        self.update_ratio = UpdateRatio(weighted, options.update_every)
        self.iteration: list[IterationStatistic] = [
            GradientStatistics(weighted, [layer.size for layer in scope.weighted]), WeightNorm(weighted), self.update_ratio]
        activated = [layer.name for layer in scope.activations]
        self.dead = DeadUnits(activated, options.dead_window, options.dead_threshold)
        self.activation: list[ActivationStatistic] = [
            self.dead, Saturation(activated, options.saturation_margin), ChannelVariance(activated, options.channel_dim)]
        self.checks = ForwardChecks(list(scope.output_taps), reductions)

    def add(self, family: Statistic) -> None:
        """Measure ``family`` too; refused when one of its columns has the name of a statistic already measured."""
        self.check_names([family])
        (self.iteration if isinstance(family, IterationStatistic) else self.activation).append(family)

    def check_names(self, families: list[Statistic]) -> None:
        """Refuse ``families`` (before any is added) when a column of one has the name of a statistic
        measured already or of another of them."""
        names = {column for known in (*self.iteration, *self.activation) for column in known.columns}
        for family in families:
            for column in family.columns:
                if column in names or column in health_metadata.BUILTIN_STATS:
                    raise ValueError(f"a statistic named {column!r} exists already; choose another name")
                names.add(column)
