"""Data: benchmark and training problems as one normalised record type (``Problem``).

``load_benchmark("math500")``, a .jsonl/.json/.parquet path or a hub id; ``register_benchmark``
adds named sources backed by Python functions (``tiny``: the built-in tiny world's problems,
read from ``world.tasks``).
"""

from .benchmarks import (
    BENCHMARKS,
    Problem,
    benchmark_names,
    load_benchmark,
    load_benchmarks,
    register_benchmark,
)

__all__ = ["BENCHMARKS", "Problem", "benchmark_names", "load_benchmark", "load_benchmarks", "register_benchmark"]
