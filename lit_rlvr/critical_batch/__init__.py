"""The critical-batch model's room: the batch rule a controller follows and the calibration of its costs.

``batch_rule``: the batch that minimises cost to a target from the noise scale, the informative share and a
step's fixed cost in rollouts, and the rules a change follows (the change limit after rounding, Adam's β₂).
``calibrate``: ``lit-rlvr calibrate``, which measures a step's fixed cost in rollouts on the user's machine.
"""
