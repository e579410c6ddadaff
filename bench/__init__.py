"""Benchmarks of the pipeline engine.

`python -m bench` measures and writes bench/results/*.json; `python -m bench.report` renders
docs/benchmarks.md from them.
"""
