"""Memory as a planned resource: the data's shape before loading, per-fit estimates, the plan's
caps (budget), and each fit's measured peak."""
