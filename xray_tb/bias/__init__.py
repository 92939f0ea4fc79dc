"""Attention-IoU: where a model looks, and whether it looks at a bias (Serianni et al., CVPR 2025).

::

    from xray_tb import bias
    maps = bias.gradcam(model, "features.6", x, target=0)            # (B, H, W) in [0, 1]
    bias.attention_iou(maps, masks[:, 0])                             # (B,)
    bias.mask_score(model, "features.6", x, masks, target=0)          # (B, R)
    bias.heatmap_score(model, "features.6", x, 0, 1)                  # (B,)
    report = xray.attention_iou(loader, target=0, protected=1, masks=["patch"])  # into the run
"""

from xray_tb.bias.evaluation import evaluate
from xray_tb.bias.gradcam import default_layer, gradcam, gradcam_maps
from xray_tb.bias.metric import attention_iou, chance_level
from xray_tb.bias.recording import read_reports, write_report
from xray_tb.bias.report import Attribute, BiasReport, Examples, Score
from xray_tb.bias.scores import heatmap_score, mask_score
from xray_tb.bias.subgroups import SUBGROUPS, SubgroupStats, subgroup_table

__all__ = [
    "gradcam",
    "gradcam_maps",
    "default_layer",
    "attention_iou",
    "chance_level",
    "mask_score",
    "heatmap_score",
    "subgroup_table",
    "SUBGROUPS",
    "SubgroupStats",
    "evaluate",
    "BiasReport",
    "Score",
    "Attribute",
    "Examples",
    "write_report",
    "read_reports",
]
