"""The statistic families of training health, one module each (see :mod:`.base` for how to add one)."""

from xray_tb.health.stats.base import ActivationStatistic, ActivationValue, IterationStatistic, IterationView, Statistic
from xray_tb.health.stats.channel_variance import ChannelVariance
from xray_tb.health.stats.custom import CUSTOM_KINDS, CustomActivationStatistic, CustomParameterStatistic
from xray_tb.health.stats.dead_units import DeadUnits
from xray_tb.health.stats.gradient import GradientStatistics
from xray_tb.health.stats.outputs import ForwardChecks
from xray_tb.health.stats.saturation import Saturation
from xray_tb.health.stats.update import UpdateRatio
from xray_tb.health.stats.weight import WeightNorm

__all__ = [
    "Statistic", "IterationStatistic", "ActivationStatistic", "IterationView", "ActivationValue", "GradientStatistics",
    "WeightNorm", "UpdateRatio", "DeadUnits", "Saturation", "ChannelVariance", "ForwardChecks",
    "CustomParameterStatistic", "CustomActivationStatistic", "CUSTOM_KINDS",
]
