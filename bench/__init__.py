"""Benchmarks of the pipeline engine: `python -m bench` measures, `python -m bench.report` renders docs/benchmarks.md."""
