"""The execution graph, which is the whole run: the plan's shape as data (shape.py: one builder per
node kind), the plan and its admission (plan.py), leak-free stacking (stacking.py), the scheduler that
walks it under an optional time budget (scheduler.py, time_budget.py), the node kinds (nodes/), what
travels to a worker and back (tasks.py) and what an executor must do for the scheduler (backend.py).

Executors (pipeline.executors) implement `backend.Backend`; nothing here imports them.
"""
