"""xray-tb: look inside a PyTorch model while it trains, in TensorBoard's Xray tab.

The packages follow the data: :mod:`xray_tb.trace` (what the model is), :mod:`xray_tb.capture` (what
to record and when), :mod:`xray_tb.io` (event files written and read back), :mod:`xray_tb.health`
(training health), :mod:`xray_tb.bias` (Attention-IoU), :mod:`xray_tb.notebook` (figures) and
:mod:`xray_tb.integrations`; :class:`Xray` composes them around one :class:`~xray_tb.recording.Recording`.
"""

from xray_tb.capture.selectors import FirstN, KeepAll, RandomFilters, ScoredRows, Selection, SelectionInfo, Selector, TopVariance
from xray_tb.health import HealthOptions
from xray_tb.io.reader import RecordedRun, open_run
from xray_tb.io.records import DamagedEventFileWarning
from xray_tb.io.remote_event_file import UploadIncompleteError, UploadWarning
from xray_tb.xray import Xray

__all__ = ["Xray", "HealthOptions", "open_run", "RecordedRun", "DamagedEventFileWarning", "UploadWarning", "UploadIncompleteError", "Selector", "Selection", "SelectionInfo", "RandomFilters", "FirstN", "KeepAll", "TopVariance", "ScoredRows"]
