"""A recorded run and TensorBoard's own app in process, for the route tests of the plugin."""

from __future__ import annotations

import json

import torch
from tensorboard import program
from tensorboard.backend import application
from tensorboard.backend.event_processing import data_ingester
from tensorboard.plugins.core import core_plugin
from werkzeug import test as wtest
from werkzeug import wrappers

from tb_plugin import xray_plugin
from tests.helpers.training import tiny_model, train_on_6x6
from xray_tb import Xray

PREFIX = "/data/plugin/xray"
CAPTURES = 50


def record(logdir, captures=CAPTURES):
    model = tiny_model()
    optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
    plan = {"0": {"weight": True, "output": True, "activation": True, "grad": True}, "3": {"weight": True, "output": True}}
    g = torch.Generator().manual_seed(0)
    with Xray(model, input_size=(1, 6, 6), logdir=str(logdir), plan=plan) as xray:
        train_on_6x6(model, optimizer, g, range(captures), lambda step: xray.take_graphs(step * 10))
    return model


def serve(logdir, *flags):
    """TensorBoard's own Python loader and WSGI app, configured as the CLI would configure them."""
    loaders = [core_plugin.CorePluginLoader(), xray_plugin.XrayLoader()]
    tensorboard = program.TensorBoard(plugins=loaders)
    tensorboard.configure(argv=["tensorboard", "--logdir", str(logdir), "--reload_interval=0", "--reload_task=blocking", "--load_fast=false", *flags])
    ingester = data_ingester.LocalDataIngester(tensorboard.flags)
    ingester.start()
    app = application.TensorBoardWSGIApp(tensorboard.flags, loaders, ingester.data_provider, deprecated_multiplexer=ingester.deprecated_multiplexer)
    client = wtest.Client(app, wrappers.Response)
    client.reload = ingester.deprecated_multiplexer.Reload  # read what was written since, as TensorBoard's reload does
    return client


def get(client, path, **params):
    response = client.get(PREFIX + path, query_string=params)
    return response.status_code, json.loads(response.get_data()) if response.mimetype == "application/json" else response.get_data()
