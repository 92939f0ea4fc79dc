"""Training health: per-iteration gradient and weight statistics, dead units and pruning, saturation,
channel variance, weight histograms, the first non-finite value, custom statistics, epochs and findings.

``Xray(..., health=True)`` (the default) turns it on; ``health=False`` switches it off, and
``health=HealthOptions(...)`` thins it (see :class:`HealthOptions`).
"""

from xray_tb.health.findings import Finding, NonFinite
from xray_tb.health.options import HealthOptions
from xray_tb.health.pruning import PruneEntry
from xray_tb.health.training import TrainingHealth

__all__ = ["TrainingHealth", "HealthOptions", "Finding", "NonFinite", "PruneEntry"]
