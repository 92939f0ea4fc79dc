"""The evaluation pass over a loader, written into a real run by Xray and read back from its files."""

from __future__ import annotations

import math

import pytest
import torch

from tb_plugin import bias_metadata
from xray_tb import Xray, bias
from xray_tb.bias.planted import LABELS, REGIONS, TinyCNN, batches, planted_images


@pytest.fixture(scope="module")
def data():
    return planted_images(48, rho=0.5, seed=7)


def model_and_xray(tmp_path, **options):
    torch.manual_seed(0)
    model = TinyCNN()
    return model, Xray(model, input_size=(3, 32, 32), logdir=str(tmp_path / "run"), plan=["features.0"], **options)


def test_the_report_scores_each_subgroup_with_its_chance_level(data):
    torch.manual_seed(0)
    model = TinyCNN()
    report = bias.evaluate(model, batches(*data, size=16), target=0, protected=1, masks=list(REGIONS), names=LABELS)
    assert report.evaluation == "shape vs patch" and report.layer == "features" and report.images == 48
    assert [score.label for score in report.scores] == ["mask: patch", "mask: shape", "heatmap"]
    maps = bias.gradcam(model, "features", data[0], 0)
    expected = bias.attention_iou(maps, data[2][:, 0])
    patch = report.score("mask", "patch").subgroups
    assert patch["all"].mean == pytest.approx(float(expected.mean()), abs=1e-6)
    assert patch["all"].chance == pytest.approx(4 * (1 / 16) / (1 + 3 / 16), abs=1e-6)  # an 8x8 patch in 32x32
    shape, patch_label = data[1][:, 0] == 1, data[1][:, 1] == 1
    assert patch["t1p0"].images == int((shape & ~patch_label).sum())
    assert patch["t1p0"].mean == pytest.approx(float(expected[shape & ~patch_label].mean()), abs=1e-6)
    heatmap = report.score("heatmap").subgroups["all"]
    a, b = bias.gradcam_maps(model, "features", data[0], [0, 1])
    assert heatmap.mean == pytest.approx(float(bias.attention_iou(a, b).mean()), abs=1e-6)
    assert heatmap.chance == pytest.approx(float(bias.chance_level(b).mean()), abs=1e-6)
    examples = report.examples
    assert examples.subgroups == ["t1p1", "t1p0", "t0p1", "t0p0"]  # one of each first
    assert examples.images.shape == (4, 32, 32, 3) and examples.maps.shape == (4, 2, 32, 32)
    assert examples.map_names == ["shape", "patch"]
    assert "shape+ patch-" in str(report)


def test_masks_from_functions_and_empty_masks(data):
    torch.manual_seed(0)
    model = TinyCNN()
    images, labels, masks = data
    # The shape region of square images only: empty for discs, left out (or counted as 0).
    regions = {"square": lambda x, y: masks[: x.shape[0], 1] * y[:, :1, None]}
    left_out = bias.evaluate(model, [(images, labels)], target=0, protected=1, masks=regions, protected_output=False)
    assert [score.label for score in left_out.scores] == ["mask: square"]
    square = left_out.score("mask").subgroups
    assert square["t0p0"].count == 0 and math.isnan(square["t0p0"].mean)
    assert square["all"].count == int(labels[:, 0].sum())
    zero = bias.evaluate(
        model, [(images, labels)], target=0, protected=1, masks=regions, protected_output=False, empty="zero"
    )
    assert zero.score("mask").subgroups["t0p0"].mean == 0.0 and zero.score("mask").subgroups["all"].count == 48
    assert zero.examples.maps.shape[1] == 1


def test_attention_iou_writes_the_result_into_the_run_at_the_current_step(tmp_path, data):
    model, xray = model_and_xray(tmp_path)
    with xray:
        for step in range(3):
            model(data[0][:8]).sum().backward()
            xray.take_graphs(step)
        first = xray.attention_iou(batches(*data, size=16), target=0, protected=1, masks=list(REGIONS), names=LABELS)
        second = xray.attention_iou(
            batches(*data, size=16), target=0, protected=1, masks=["patch", "shape"], names=LABELS, step=10, examples=2
        )
    assert (first.step, second.step) == (2, 10)
    stored = bias.read_reports(tmp_path / "run")
    assert list(stored) == ["shape vs patch"] and list(stored["shape vs patch"]) == [2, 10]
    again = stored["shape vs patch"][2]
    assert again.layer == first.layer and again.images == 48
    for kept, fresh in zip(again.scores, first.scores):
        assert kept.label == fresh.label
        for name in bias.SUBGROUPS:
            a, b = kept.subgroups[name], fresh.subgroups[name]
            assert (a.count, a.images) == (b.count, b.images)
            assert a.mean == pytest.approx(b.mean, abs=1e-12) and a.chance == pytest.approx(b.chance, abs=1e-12)
    assert again.examples.images.shape == (4, 32, 32, 3)
    assert torch.allclose(
        torch.from_numpy(again.examples.maps), torch.from_numpy(first.examples.maps), atol=1e-3
    )  # float16
    assert stored["shape vs patch"][10].examples.images.shape[0] == 2
    # The recorder's own reader still reads the run, and the layers are there.
    from xray_tb import open_run

    run = open_run(tmp_path / "run")
    assert "features.0" in run.records()
    assert run.bias()["shape vs patch"][10].images == 48


def test_an_evaluation_between_backward_and_take_graphs_leaves_the_training_capture(tmp_path, data):
    torch.manual_seed(0)
    model = TinyCNN()
    x = data[0][:8]
    with Xray(model, input_size=(3, 32, 32), logdir=str(tmp_path / "run"), plan={"features.0": {"output": True}}) as xray:
        model(x).sum().backward()  # no schedule: Xray's hooks are armed for this forward
        xray.attention_iou(batches(*data, size=16), target=0, protected=1, step=0)
        xray.take_graphs(0)
        values, header = xray.load("features.0", "output", 0)
    with torch.no_grad():
        expected = model.features[0](x)[0, header.indices]
    assert torch.allclose(values, expected, atol=1e-6)


def test_the_means_are_scalars_too(tmp_path, data):
    from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

    model, xray = model_and_xray(tmp_path)
    with xray:
        report = xray.attention_iou(
            batches(*data, size=24), target=0, protected=1, masks=["patch", "shape"], names=LABELS, step=5
        )
    accumulator = EventAccumulator(str(tmp_path / "run"))
    accumulator.Reload()
    tag = bias_metadata.scalar_tag("shape vs patch", "mask", "patch", "all")
    assert tag == "xray_bias/shape vs patch/mask.patch/all"
    assert tag in accumulator.Tags()["scalars"]
    (event,) = accumulator.Scalars(tag)
    assert event.step == 5 and event.value == pytest.approx(
        report.score("mask", "patch").subgroups["all"].mean, abs=1e-6
    )


def test_the_model_is_left_as_it_was(tmp_path, data):
    model, xray = model_and_xray(tmp_path)
    model.train()
    model(data[0][:8]).sum().backward()
    grads = [p.grad.clone() for p in model.parameters()]
    rng = torch.get_rng_state()
    with xray:
        xray.attention_iou(batches(*data, size=16), target=0, protected=1, masks=list(REGIONS))
    assert model.training and all(m.training for m in model.modules())
    assert all(torch.equal(p.grad, g) for p, g in zip(model.parameters(), grads))
    assert torch.equal(torch.get_rng_state(), rng)
    assert not any(m._forward_hooks for m in model.modules())


def test_bad_arguments_are_named(tmp_path, data):
    model, xray = model_and_xray(tmp_path)
    images, labels, masks = data
    with xray:
        with pytest.raises(ValueError, match="yield \\(x, labels, masks\\)"):
            xray.attention_iou([(images, labels)], target=0, protected=1, masks=["patch"])
        with pytest.raises(ValueError, match="R = 1 regions"):
            xray.attention_iou([(images, labels, masks)], target=0, protected=1, masks=["patch"])
        with pytest.raises(ValueError, match=r"masks=\{'patch': fn\}: fn\(x, labels\) must return one \(B, H, W\) mask per image, "
                                             r"got \(16, 1, 32, 32\); drop the channel dimension"):
            xray.attention_iou([(images[:16], labels[:16])], target=0, protected=1, masks={"patch": lambda x, y: torch.ones(len(x), 1, 32, 32)})
        with pytest.raises(ValueError, match="protected=2 but the labels have 2 columns"):
            xray.attention_iou([(images, labels)], target=0, protected=2)
        with pytest.raises(ValueError, match="unknown layer 'feature'; did you mean 'features'"):
            xray.attention_iou([(images, labels)], target=0, protected=1, layer="feature")
        with pytest.raises(ValueError, match="no batch"):
            xray.attention_iou([], target=0, protected=1)
        for loader, got in ((None, "NoneType"), (images, "Tensor")):
            with pytest.raises(TypeError, match=rf"loader must yield batches \(x, labels\) .*; got {got}"):
                xray.attention_iou(loader, target=0, protected=1)
        with pytest.raises(ValueError, match="target must be a column index"):
            xray.attention_iou([(images, labels)], target="shape", protected=1)
        with pytest.raises(ValueError, match="name must be a non-empty string"):
            xray.attention_iou([(images, labels)], target=0, protected=1, name="")
        with pytest.raises(ValueError, match="step must be a whole number"):
            xray.attention_iou([(images, labels)], target=0, protected=1, step=-1)
        outputs = model(images[:2]).shape[1]
        with pytest.raises(ValueError, match=rf"protected_output=9 is past the model's {outputs} outputs .*protected_output=False"):
            xray.attention_iou([(images, labels)], target=0, protected=1, protected_output=9)
        with pytest.raises(ValueError, match=rf"target_output=7 is past the model's {outputs} outputs .*pass target_output="):
            xray.attention_iou([(images, labels)], target=0, protected=1, target_output=7)
        with pytest.raises(ValueError, match=r"the protected attribute \(labels column 1\) must be binary, 0 or 1; got \[2.0\]"):
            xray.attention_iou([(images, torch.cat([labels[:, :1], labels[:, 1:] * 2], 1))], target=0, protected=1)
        with torch.inference_mode(), pytest.raises(RuntimeError, match=r"outside torch.inference_mode\(\)"):
            xray.attention_iou([(images, labels)], target=0, protected=1)
    with pytest.raises(RuntimeError, match="closed"):
        xray.attention_iou([(images, labels)], target=0, protected=1)
    assert bias.read_reports(tmp_path / "run") == {}
