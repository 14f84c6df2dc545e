"""msprof-py: an msprof-like profiling toolkit for PyTorch on a simulated Ascend-style NPU."""

__version__ = "0.1.0"
