"""The critical-batch model's room: the batch rule a controller follows and the costs it weighs.

``batch_rule``: the batch that costs least to a target from the noise scale and a step's fixed cost in
rollouts, and the rules a change follows (the change limit after rounding, Adam's β₂).
``run_noise_scale``: a run's noise scale and its jackknife error from the per-step sums (torch-free: the
report reads it from ``metrics.csv``, ``AdaptiveBatch`` over its window).
``cpu_clock``: CPU seconds of a fit and its reward workers, per step (``CpuClock``).
``calibrate``: ``lit-rlvr calibrate``, which measures a step's fixed cost in rollouts on the user's machine.
``group_gradients``: each prompt group's gradient, read by hooks during the update's backward.
``noise_scale``: the per-step estimator (unbiased |G|² and tr Σ from the groups' gradients) and its tracker;
``noise_names``: the names it logs under, and the old ones that committed results have (every reader's one table).
``levers``: what each lever (a smaller batch or group, refill, pre-selection) would save under the model.
The update's side of the meter (hooks on for one update, group ids per forward) is ``lit_rlvr.update.noise_meter``;
the summary's and the report's lines are ``lit_rlvr.report.lever_report``. Only ``group_gradients`` and ``noise_scale``
import torch: the report reads the rest torch-free.
"""
