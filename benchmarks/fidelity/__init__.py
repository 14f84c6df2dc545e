"""Model definitions and helpers for the fidelity benchmark (``benchmarks/bench_fidelity.py``)."""
