"""xray-tb: look inside a PyTorch model while it trains, in TensorBoard's Xray tab."""

from xray_tb.health import HealthOptions
from xray_tb.reader import RecordedRun, open_run
from xray_tb.records import DamagedEventFileWarning
from xray_tb.selectors import FirstN, KeepAll, RandomFilters, Selection, SelectionInfo, Selector, TopVariance
from xray_tb.xray import Xray

__all__ = ["Xray", "HealthOptions", "open_run", "RecordedRun", "DamagedEventFileWarning", "Selector", "Selection", "SelectionInfo", "RandomFilters", "FirstN", "KeepAll", "TopVariance"]
