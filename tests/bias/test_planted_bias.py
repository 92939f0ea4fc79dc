"""The planted-bias study: a model trained with a spurious corner patch looks at it, one trained
without the correlation does not, and Attention-IoU tells them apart by the margins of issue 11."""

from __future__ import annotations

import pytest
import torch

from xray_tb import bias
from xray_tb.bias.planted import LABELS, REGIONS, TinyCNN, accuracy, batches, planted_images, train

TRAIN, TEST, EPOCHS = 3000, 1000, 6


def test_the_patch_agrees_with_the_shape_at_rate_rho():
    for rho in (1.0, 0.8, 0.5):
        _, labels, masks = planted_images(2000, rho, seed=0)
        agreement = float((labels[:, 0] == labels[:, 1]).float().mean())
        assert agreement == pytest.approx(rho, abs=0.03)
    images, labels, masks = planted_images(200, 0.5, seed=1)
    assert masks[:, 0].sum(dim=(1, 2)).eq(64).all()  # one 8x8 corner patch per image
    assert float(labels[:, 0].mean()) == pytest.approx(0.5, abs=0.1)
    assert torch.equal(planted_images(20, 0.5, seed=1)[0], planted_images(20, 0.5, seed=1)[0])  # seeded


@pytest.fixture(scope="module")
def one_thread():
    threads = torch.get_num_threads()
    torch.set_num_threads(1)  # tiny convolutions: more threads only wait on each other, and the result is deterministic
    yield
    torch.set_num_threads(threads)


@pytest.fixture(scope="module")
def reports(one_thread):
    test = planted_images(TEST, 0.5, seed=2)  # balanced
    found = {}
    for rho in (1.0, 0.5):
        images, labels, _ = planted_images(TRAIN, rho, seed=1)
        torch.manual_seed(0)
        model = TinyCNN()
        train(model, images, labels, seed=0, epochs=EPOCHS)
        report = bias.evaluate(model, batches(*test), target=0, protected=1, masks=list(REGIONS), names=LABELS)
        found[rho] = (report, accuracy(model, test[0], test[1]))
    return found


@pytest.mark.slow
def test_the_biased_model_looks_at_the_patch(reports):
    biased = reports[1.0][0].score("mask", "patch").subgroups["all"]
    unbiased = reports[0.5][0].score("mask", "patch").subgroups["all"]
    assert biased.chance == pytest.approx(4 * (1 / 16) / (1 + 3 / 16), abs=1e-6)
    assert biased.mean >= 2.5 * biased.chance
    assert biased.mean - unbiased.mean >= 0.15
    assert unbiased.mean < unbiased.chance  # the unbiased model looks away from the patch
    # Each subgroup, the ones where the patch contradicts the shape included, tells the same story.
    for name in ("t1p0", "t0p1"):
        assert reports[1.0][0].score("mask", "patch").subgroups[name].mean >= 2.5 * biased.chance


@pytest.mark.slow
def test_the_heatmap_score_sees_one_map_for_two_attributes(reports):
    assert reports[1.0][0].score("heatmap").subgroups["all"].mean >= 0.9
    assert reports[0.5][0].score("heatmap").subgroups["all"].mean <= 0.65


@pytest.mark.slow
def test_what_the_models_learned(reports):
    (shape_biased, patch_biased), (shape_fair, patch_fair) = reports[1.0][1], reports[0.5][1]
    assert shape_biased < 0.65 <= 0.95 <= shape_fair  # on balanced data the biased model guesses the shape
    assert min(patch_biased, patch_fair) >= 0.95
    fair_shape = reports[0.5][0].score("mask", "shape").subgroups["all"]
    assert fair_shape.mean > fair_shape.chance
