"""What an Attention-IoU evaluation found: :class:`BiasReport`, and its JSON form for the run."""

from __future__ import annotations

import dataclasses
import math
from typing import Optional

import numpy as np

from xray_tb.bias.subgroups import SUBGROUPS, SubgroupStats

SCORE_KINDS = ("mask", "heatmap")


@dataclasses.dataclass(frozen=True)
class Attribute:
    """A labelled attribute: its column in the labels, its name, and the model output explaining it
    (None when the model has no output for it)."""

    index: int
    name: str
    output: Optional[int]


@dataclasses.dataclass(frozen=True)
class Score:
    """One score by subgroup: ``kind`` ``"mask"`` (the target's map against ``region``) or
    ``"heatmap"`` (the target's map against the protected attribute's)."""

    kind: str
    region: Optional[str]
    subgroups: dict[str, SubgroupStats]

    @property
    def label(self) -> str:
        return f"mask: {self.region}" if self.kind == "mask" else "heatmap"


@dataclasses.dataclass
class Examples:
    """A few evaluated images with their maps, for the tab: ``images`` ``(N, H, W, 3)`` uint8,
    ``maps`` ``(N, M, H, W)`` float32 in [0, 1], one per name of ``map_names``."""

    images: np.ndarray
    maps: np.ndarray
    map_names: list[str]
    labels: list[list[int]]  # (target, protected) of each image
    subgroups: list[str]
    indices: list[int]  # position of each image in the evaluated set


@dataclasses.dataclass
class BiasReport:
    """The result of :func:`xray_tb.bias.evaluate`: every score by subgroup, with chance levels."""

    evaluation: str
    layer: str
    target: Attribute
    protected: Attribute
    images: int
    empty: str
    scores: list[Score]
    examples: Optional[Examples] = None
    step: Optional[int] = None

    def score(self, kind: str, region: Optional[str] = None) -> Score:
        """The score of ``kind`` (``"mask"`` with its ``region``, or ``"heatmap"``)."""
        for score in self.scores:
            if score.kind == kind and (kind != "mask" or region is None or score.region == region):
                return score
        have = ", ".join(score.label for score in self.scores) or "none"
        raise KeyError(f"no {kind!r} score{f' for region {region!r}' if region else ''} in this report; it has: {have}")

    def to_json(self) -> dict:
        """The document written into the run (NaN as None)."""
        return {
            "evaluation": self.evaluation,
            "layer": self.layer,
            "target": dataclasses.asdict(self.target),
            "protected": dataclasses.asdict(self.protected),
            "images": self.images,
            "empty": self.empty,
            "subgroups": list(SUBGROUPS),
            "scores": [
                {
                    "kind": score.kind,
                    "region": score.region,
                    "label": score.label,
                    "subgroups": {name: stats.to_json() for name, stats in score.subgroups.items()},
                }
                for score in self.scores
            ],
        }

    @classmethod
    def from_json(cls, document: dict, step: Optional[int] = None) -> "BiasReport":
        """A report read back from its document (without examples)."""
        return cls(
            evaluation=document["evaluation"],
            layer=document["layer"],
            target=Attribute(**document["target"]),
            protected=Attribute(**document["protected"]),
            images=int(document["images"]),
            empty=document.get("empty", "nan"),
            scores=[
                Score(
                    item["kind"],
                    item.get("region"),
                    {name: SubgroupStats.from_json(stats) for name, stats in item["subgroups"].items()},
                )
                for item in document["scores"]
            ],
            step=step,
        )

    def __str__(self) -> str:
        t, p = self.target.name, self.protected.name
        heads = {"all": "all", "t1p1": f"{t}+ {p}+", "t1p0": f"{t}+ {p}-", "t0p1": f"{t}- {p}+", "t0p0": f"{t}- {p}-"}
        lines = [f"Attention-IoU of {t!r} at layer {self.layer!r}, {self.images} images (protected: {p!r})"]
        lines.append(f"{'score':<20}" + "".join(f"{heads[name]:>22}" for name in SUBGROUPS))
        for score in self.scores:
            cells = []
            for name in SUBGROUPS:
                stats = score.subgroups[name]
                cells.append(f"{_fmt(stats.mean)} (chance {_fmt(stats.chance)})".rjust(22))
            lines.append(f"{score.label:<20}" + "".join(cells))
        return "\n".join(lines)


def _fmt(value: float) -> str:
    return "  -  " if value is None or not math.isfinite(value) else f"{value:.3f}"
