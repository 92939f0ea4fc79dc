"""On the Python loader the plugin lists a run from the multiplexer itself (TensorBoard's provider
looks at every point's tensor): the listing must agree with the provider's on what routes read."""

from __future__ import annotations

import warnings

from tensorboard import context
from tensorboard.backend.event_processing import data_provider, plugin_event_multiplexer

from tb_plugin import metadata, series
from tests.helpers.plugin_app import record


def test_listing_agrees_with_tensorboards_provider(tmp_path):
    record(tmp_path / "a", captures=4)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # a step recorded again: the rewrite below is on purpose
        record(tmp_path / "a", captures=2)  # steps 0 and 10 again, after 30: the last point is not the highest step
    record(tmp_path / "b", captures=3)
    (tmp_path / "c").mkdir()
    multiplexer = plugin_event_multiplexer.EventMultiplexer(tensor_size_guidance={metadata.PLUGIN_NAME: 0})
    multiplexer.AddRunsFromDirectory(str(tmp_path))
    multiplexer.Reload()
    tensorboards = data_provider.MultiplexerDataProvider(multiplexer, str(tmp_path))
    reader = series.SeriesReader(tensorboards, multiplexer)
    ctx = context.RequestContext()

    expected = tensorboards.list_blob_sequences(ctx, experiment_id="", plugin_name=metadata.PLUGIN_NAME)
    listed = reader.list(ctx, "")
    assert sorted(listed) == sorted(expected) == ["a", "b"]
    for run, tags in expected.items():
        assert sorted(listed[run]) == sorted(tags)
        for tag, theirs in tags.items():
            ours = listed[run][tag]
            assert (ours.max_step, ours.max_wall_time, ours.plugin_content) == (theirs.max_step, theirs.max_wall_time, theirs.plugin_content)
    assert listed["a"][metadata.ARCHITECTURE_TAG].max_step >= 0
    assert max(ts.max_step for ts in listed["a"].values()) == 30  # the highest step, not the last written
    assert reader.list(ctx, "", "a") == {"a": listed["a"]}
    assert reader.list(ctx, "", "c") == {"c": {}}  # a run without Xray data: routes answer 404
