"""Contract suites a new implementation runs to prove it behaves as the engine expects.

`pipeline.testing.backend_contract.BackendContract` (an executor's backend, `pipeline.graph.backend`) and
`pipeline.testing.tracker_contract.TrackerContract` (a tracker, `pipeline.tracking.NullTracker`) and
`pipeline.testing.model_conformance.ModelKindConformance` (a model kind, `pipeline.models.TabularModel`) are
pytest classes: subclass one in a test module, give it the fixture that builds your implementation,
and every check of the contract runs against it (tests/contract/ runs them on the engine's own).
They need pytest (`pip install -e '.[test]'`); nothing in the engine imports them.
"""
