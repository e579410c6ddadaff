"""The benchmark suites; each module has `run(opts) -> dict` (settings, figures, notes)."""
