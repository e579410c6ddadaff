"""Planning: from the settings' PlanInput to the Plan (`pipeline.planning.planner.make_plan`), and what
it is made of: each model's device, its allocation, the memory plan, the fit-time payoffs and the time
budget. Empty, so that a module that needs one part (a model's fit-time estimate, through
pipeline.planning.payoff) does not import the planner and the execution graph with it: a logged model
ships the engine modules its imports reach (pipeline.tracking.shipped_code)."""
