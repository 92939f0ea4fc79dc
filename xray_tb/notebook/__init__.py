"""What a person sees from Python: figures, GIFs and a live Xray's read-back.

:mod:`~xray_tb.notebook.views` draws frames with matplotlib (the ``notebook`` extra), and
:mod:`~xray_tb.notebook.readback` is what ``Xray.records()``, ``load()``, ``show_last_graphs()``,
``save_gif()`` and ``summary()`` do. They sit apart from :mod:`xray_tb.io` because they draw (and
need matplotlib, imported only when a figure is made), while ``io`` only reads and writes files.
"""
