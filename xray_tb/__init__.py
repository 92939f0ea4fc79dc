"""xray-tb: look inside a PyTorch model while it trains, in TensorBoard's Xray tab."""

from xray_tb.selectors import FirstN, KeepAll, RandomFilters, Selection, SelectionInfo, Selector
from xray_tb.xray import Xray

__all__ = ["Xray", "Selector", "Selection", "SelectionInfo", "RandomFilters", "FirstN", "KeepAll"]
