"""Bad training-health input is refused with what was wrong and how to fix it (close matches for a
misspelt name, the allowed range for a value), before anything changes; valid values still work."""

from __future__ import annotations

import math

import numpy as np
import pytest
import torch
from torch.nn import functional as F

from xray_tb import Xray
from xray_tb.health import HealthOptions

from tests.health.helpers import batches, relu_mlp


@pytest.mark.parametrize("rules, message", [
    ({"vanishing_gradiant": {}}, r"unknown rules 'vanishing_gradiant' \(did you mean 'vanishing_gradient'\?\); the rules: dead_units, "),
    ({"vanishing_gradient": {"ratoi": 1e-4}}, r"rule 'vanishing_gradient' has no setting 'ratoi' \(did you mean 'ratio'\?\); its settings: ratio, patience"),
    ({"nonfinite": {"patience": 3}}, r"rule 'nonfinite' takes no settings, got 'patience': .*rules=\{'nonfinite': False\}"),
])
def test_a_misspelt_rule_or_setting_names_the_close_matches(rules, message):
    with pytest.raises(ValueError, match=message):
        HealthOptions(rules=rules)


@pytest.mark.parametrize("rule, setting, value, allowed", [
    ("dead_units", "fraction", 5.0, r"a share in \[0, 1\)"),
    ("dead_units", "fraction", -1.0, r"a share in \[0, 1\)"),
    ("saturation", "fraction", 1, r"a share in \[0, 1\)"),
    ("vanishing_gradient", "ratio", -1.0, r"a ratio in \(0, 1\)"),
    ("exploding_gradient", "max_norm", 0.0, "a gradient norm > 0"),
    ("exploding_gradient", "growth", 0.5, "a factor > 1"),
    ("update_ratio", "low", -1e-3, "a ratio >= 0"),
])
def test_a_rule_setting_out_of_range_names_rule_setting_value_and_range(rule, setting, value, allowed):
    message = rf"rules=\{{'{rule}': \{{'{setting}': \.\.\.\}}\}}\) takes {allowed}.*, got {value!r}"
    with pytest.raises(ValueError, match=message):
        HealthOptions(rules={rule: {setting: value}})


def test_update_ratio_low_above_high_is_refused():
    with pytest.raises(ValueError, match=r"'update_ratio': \{'high': \.\.\.\}\}\) takes a ratio above low \(1\.0\), got 0\.1"):
        HealthOptions(rules={"update_ratio": {"low": 1.0, "high": 0.1}})


def test_numpy_whole_numbers_are_taken_as_ints_and_bools_are_not():
    options = HealthOptions(every=np.int64(4), update_every=np.int32(2), dead_window=np.int64(3), flush_every=np.int16(7),
                            histograms_every=np.int64(5), channel_dim=np.int64(1), budget=np.float32(0.5),
                            rules={"zero_gradient": {"patience": np.int64(2)}, "exploding_gradient": {"max_norm": 1000}})
    assert options.every == 4 and type(options.every) is int
    for name in ("update_every", "dead_window", "flush_every", "histograms_every", "channel_dim"):
        assert type(getattr(options, name)) is int
    assert options.budget == 0.5 and type(options.budget) is float
    for value in (True, np.float64(2.0), 0):
        with pytest.raises(ValueError, match=r"every=\.\.\.\) takes 'auto' or a whole number >= 1"):
            HealthOptions(every=value)
    with pytest.raises(ValueError, match=r"dead_window=\.\.\.\) takes a whole number >= 1, got True"):
        HealthOptions(dead_window=True)


def four_dead_units():
    """relu_mlp() with units 0-3 of layer 0 dead, and a copy of its state."""
    model = relu_mlp()
    with torch.no_grad():
        model[0].weight[:4] = 0.0
        model[0].bias[:4] = -1.0
    return model, {name: value.clone() for name, value in model.state_dict().items()}


def test_a_bad_dead_unit_threshold_is_refused_and_changes_nothing(tmp_path):
    model, weights = four_dead_units()
    with Xray(model, input_size=(16,), logdir=str(tmp_path), health=HealthOptions(every=1)) as xray:
        for x, y in batches(3):
            model.zero_grad()
            F.cross_entropy(model(x), y).backward()
            xray.take_graphs()
        dead = xray.dead_units()
        assert dead["0"] == [0, 1, 2, 3]
        for call in (xray.dead_units, lambda threshold: xray.prune(threshold=threshold, dry_run=False)):
            for threshold in (math.nan, math.inf, -math.inf):
                with pytest.raises(ValueError, match=r"threshold= takes a finite number.*got -?(nan|inf)"):
                    call(threshold)
            for threshold in ("x", "0", [0.0]):
                with pytest.raises(TypeError, match=rf"threshold= takes a finite number.*got {threshold!r}".replace("[", r"\[")):
                    call(threshold)
        assert all(torch.equal(value, weights[name]) for name, value in model.state_dict().items())
        assert xray.dead_units() == dead and xray.dead_units(np.float32(0.0)) == dead and xray.dead_units(0) == dead
        assert [entry.units for entry in xray.prune(threshold=np.float64(0.0))] == [dead["0"]]


@pytest.mark.parametrize("value", [math.nan, -1.0, "10"])
def test_a_flush_interval_that_is_no_number_of_seconds_is_refused(value):
    with pytest.raises(ValueError, match=r"HealthOptions\(flush_seconds=...\) takes a number of seconds >= 0"):
        HealthOptions(flush_seconds=value)  # NaN passed the >= 0 check before: health was then written at close only


def test_prune_remove_without_applying_and_a_statistic_added_after_close_are_refused(tmp_path):
    model, weights = four_dead_units()
    xray = Xray(model, input_size=(16,), logdir=str(tmp_path), health=HealthOptions(every=1))
    for x, y in batches(3):
        model.zero_grad()
        F.cross_entropy(model(x), y).backward()
        xray.take_graphs()
    # prune(remove=True) alone was a dry run that said applied=False and changed nothing, silently
    with pytest.raises(ValueError, match=r"prune\(remove=True\) makes the masks permanent.*prune\(dry_run=False, remove=True\)"):
        xray.prune(remove=True)
    assert all(torch.equal(value, weights[name]) for name, value in model.state_dict().items())
    xray.close()
    with pytest.raises(RuntimeError, match="this Xray is closed"):  # accepted silently before
        xray.add_statistic("grad_rms", lambda g: g.square().mean().sqrt())
