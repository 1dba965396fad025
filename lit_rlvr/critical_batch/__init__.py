"""The critical-batch model's room: the batch rule a controller follows and the costs it weighs.

``batch_rule``: the batch that costs least to a target from the noise scale and a step's fixed cost in
rollouts, and the rules a change follows (the change limit after rounding, Adam's β₂).
``run_noise_scale``: a run's noise scale and its jackknife error from the per-step sums (torch-free: the
report reads it from ``metrics.csv``, ``AdaptiveBatch`` over its window).
``cpu_clock``: CPU seconds of a fit and its reward workers, per step (``CpuClock``).
``calibrate``: ``lit-rlvr calibrate``, which measures a step's fixed cost in rollouts on the user's machine.
The per-step estimator is still in ``lit_rlvr.update`` (``noise_scale``, ``noise_meter``,
``group_gradients``) and the lever formulas in ``lit_rlvr.levers``.
"""
