"""Server-side binning of health matrices: each column shows its bin's worst value."""

from __future__ import annotations

import numpy as np

from tb_plugin.health_binning import bin_matrix, bin_starts


def test_bins_are_contiguous_and_near_equal():
    starts = bin_starts(10, 3)
    assert starts.tolist() == [0, 3, 6]
    sizes = np.diff(np.append(bin_starts(20000, 800), 20000))
    assert sizes.min() == sizes.max() == 25


def test_a_one_step_spike_and_a_nan_survive_binning():
    steps = np.arange(1000) * 2
    values = np.full((2, 1000), 0.5, np.float32)
    values[0, 437] = 1e6  # a one-step spike
    values[1, 901] = np.nan  # a recorded NaN
    values[1, 10] = np.inf
    present = np.ones_like(values, bool)
    out = bin_matrix(steps, values, present, 10)
    assert out.binned and out.steps.tolist() == list(range(0, 2000, 200)) and out.last_steps.tolist() == list(range(198, 2000, 200))
    assert out.values[0, 4] == 1e6 and (np.delete(out.values[0], 4) == 0.5).all()
    assert np.isnan(out.values[1, 9]) and out.values[1, 0] == np.inf and (out.values[1, 1:9] == 0.5).all()


def test_signed_statistics_keep_the_largest_magnitude_with_its_sign():
    values = np.array([[1.0, -7.0, 3.0, 2.0, 5.0, -1.0]], np.float32)
    present = np.ones_like(values, bool)
    assert bin_matrix(np.arange(6), values, present, 2, signed=True).values.tolist() == [[-7.0, 5.0]]
    assert bin_matrix(np.arange(6), values, present, 2, signed=False).values.tolist() == [[3.0, 5.0]]


def test_present_marks_bins_with_any_value_and_absent_values_are_ignored():
    values = np.array([[9.0, 1.0, np.nan, np.nan, 2.0, 3.0]], np.float32)
    present = np.array([[False, True, False, False, True, False]])  # the 9 is absent: never counted
    out = bin_matrix(np.arange(6), values, present, 3)
    assert out.present.tolist() == [[True, False, True]]
    assert out.values[0, 0] == 1.0 and np.isnan(out.values[0, 1]) and out.values[0, 2] == 2.0


def test_a_matrix_that_fits_is_served_as_it_is():
    values = np.array([[1.0, np.nan]], np.float32)
    present = np.array([[True, False]])
    out = bin_matrix(np.array([5, 7]), values, present, 800)
    assert not out.binned and out.steps.tolist() == out.last_steps.tolist() == [5, 7] and out.present.tolist() == [[True, False]]
