"""The bias part of the contract between the recorder and the plugin: Attention-IoU results in a run.

Layout in the event files, all under plugin name :data:`tb_plugin.metadata.PLUGIN_NAME` and data class
``BLOB_SEQUENCE`` (numpy and protos only, never torch). ``<evaluation>`` is the evaluation's name
(``"shape vs patch"``), written with :func:`tb_plugin.metadata.encode_name`; each evaluation is filed
at the training step it was run at, and a later write of a step replaces an earlier one.

* ``xray/bias/<evaluation>/result``: one blob, the JSON document of the result: the layer, the
  target and protected attributes (``{"index", "name", "output"}``), the number of images, the rule
  for empty masks, the subgroup keys (:data:`SUBGROUPS`), and ``scores``, a list of
  ``{"kind": "mask"|"heatmap", "region", "label", "subgroups": {key: {"mean", "std", "count",
  "images", "chance"}}}``. A mean or chance that is undefined (no image scored) is ``null``.
  Plugin content ``{"type": "bias", "evaluation": ..., "part": "result"}``.
* ``xray/bias/<evaluation>/examples``: three blobs: a JSON header ``{"map_names", "labels",
  "subgroups", "indices"}``, the images as an ``.npy`` uint8 array ``(N, H, W, 3)``, and their maps
  as an ``.npy`` float16 array ``(N, M, H, W)`` in [0, 1], map ``m`` explaining ``map_names[m]``.
  Plugin content ``{"type": "bias", "evaluation": ..., "part": "examples"}``.
* Each subgroup's mean is also a plain scalar (``simple_value``, no plugin), so it shows in the
  Scalars tab: ``xray_bias/<evaluation>/<score>/<subgroup>``, ``<score>`` being ``heatmap`` or
  ``mask.<region>`` (the region encoded too), and its chance level under ``.../<subgroup>_chance``.
"""

from __future__ import annotations

import json
import math
from typing import Any, Optional

import numpy as np
from tensorboard.compat.proto import summary_pb2

from tb_plugin import metadata

TAG_PREFIX = "xray/bias/"
SCALAR_PREFIX = "xray_bias/"
PARTS = ("result", "examples")
#: Subgroup keys: all images, then target (t) and protected (p) attribute 1 or 0.
SUBGROUPS = ("all", "t1p1", "t1p0", "t0p1", "t0p0")
CONTENT_TYPE = "bias"


def tag(evaluation: str, part: str) -> str:
    """The tag of one part (:data:`PARTS`) of an evaluation."""
    if part not in PARTS:
        raise ValueError(f"part must be one of {', '.join(PARTS)}, got {part!r}")
    return f"{TAG_PREFIX}{metadata.encode_name(evaluation)}/{part}"


def parse_tag(tag_name: str) -> Optional[tuple[str, str]]:
    """``(evaluation, part)`` of a bias tag, None for any other tag."""
    if not tag_name.startswith(TAG_PREFIX):
        return None
    encoded, _, part = tag_name[len(TAG_PREFIX) :].rpartition("/")
    if not encoded or part not in PARTS:
        return None
    return metadata.decode_name(encoded), part


def score_key(kind: str, region: Optional[str]) -> str:
    """How a score is named inside a scalar tag: ``heatmap`` or ``mask.<region>``."""
    return "heatmap" if kind == "heatmap" else f"mask.{metadata.encode_name(region or '')}"


def scalar_tag(evaluation: str, kind: str, region: Optional[str], subgroup: str, chance: bool = False) -> str:
    """The plain scalar tag of one subgroup's mean (or chance level) of one score."""
    suffix = "_chance" if chance else ""
    return f"{SCALAR_PREFIX}{metadata.encode_name(evaluation)}/{score_key(kind, region)}/{subgroup}{suffix}"


def result_summary(document: dict) -> summary_pb2.Summary:
    """A summary holding one evaluation's result document and its means as plain scalars."""
    evaluation = document["evaluation"]
    summary = summary_pb2.Summary()
    _add_blobs(
        summary,
        tag(evaluation, "result"),
        evaluation,
        "result",
        [json.dumps(document, allow_nan=False).encode("utf-8")],
    )
    for score in document["scores"]:
        for subgroup, stats in score["subgroups"].items():
            for chance, key in ((False, "mean"), (True, "chance")):
                value = stats.get(key)
                if value is not None and math.isfinite(value):
                    summary.value.add(
                        tag=scalar_tag(evaluation, score["kind"], score.get("region"), subgroup, chance),
                        simple_value=value,
                    )
    return summary


def examples_summary(evaluation: str, header: dict, images: np.ndarray, maps: np.ndarray) -> summary_pb2.Summary:
    """A summary holding an evaluation's example images ``(N, H, W, 3)`` uint8 and maps ``(N, M, H, W)``."""
    images = np.ascontiguousarray(images, dtype=np.uint8)
    maps = np.ascontiguousarray(np.clip(maps, 0.0, 1.0), dtype=np.float16)
    if (
        images.ndim != 4
        or images.shape[-1] != 3
        or maps.ndim != 4
        or maps.shape[0] != images.shape[0]
        or maps.shape[2:] != images.shape[1:3]
    ):
        raise ValueError(
            f"example images must be (N, H, W, 3) and maps (N, M, H, W); got {images.shape} and {maps.shape}"
        )
    summary = summary_pb2.Summary()
    blobs = [json.dumps(header).encode("utf-8"), metadata.encode_array(images), metadata.encode_array(maps)]
    _add_blobs(summary, tag(evaluation, "examples"), evaluation, "examples", blobs)
    return summary


def decode_result(blobs: list[bytes]) -> dict[str, Any]:
    """The result document of a ``result`` tag's blobs."""
    return json.loads(blobs[0])


def decode_examples(blobs: list[bytes]) -> tuple[dict[str, Any], np.ndarray, np.ndarray]:
    """``(header, images, maps)`` of an ``examples`` tag's blobs."""
    return json.loads(blobs[0]), metadata.decode_array(blobs[1]), metadata.decode_array(blobs[2])


def _add_blobs(summary: summary_pb2.Summary, tag_name: str, evaluation: str, part: str, blobs: list[bytes]) -> None:
    content = metadata.create_summary_metadata({"type": CONTENT_TYPE, "evaluation": evaluation, "part": part})
    metadata.add_blobs(summary, tag_name, content, blobs)
