"""The GPU proof kit: everything a GPU box without network access lacks, packed into calls of a bounded
size (`kit`), the on-box half that reassembles and installs it (`onbox`, `run.sh`), the measurements in
priority order (`steps`), and the way back from the box's JSON to bench/results/ and models/<kind>_costs.yaml
(`collect`). docs/gpu_kit.md says how they fit together."""
