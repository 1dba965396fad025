"""Benchmarks: every selection strategy side by side.

* ``sim``: runs the real selector callbacks through the
  real training step (``GRPOModule.training_step``, ``RolloutLoop``, ``PromptDataModule``)
  with a simulated policy in place of the model, so strategies can be compared over
  hundreds of steps and 10,000+ prompts in minutes on a CPU.
* ``recorder``: ``SelectionRecorder``, a side-effect-free callback that writes every
  prompt's per-step outcome (skipped, unused, easy, hard, effective) to a CSV.
* ``report``: turns the logs of any runs (simulated or real ``lit-rlvr fit`` runs)
  into PNG plots and a markdown table; ``result_report`` does the same from result files.
* ``group_value``: ``GroupValueProbe``, a callback that measures each trained group's gradient against a uniform
  draw of candidates' and a held-out gradient, changing nothing in the training (``bench_real.py --group-value-every``).
* ``stats``: the mean ± std over seeds, paired ratios and number formatting the reports share.

Commands: ``python benchmarks/simulate.py --out runs/sim`` and
``python benchmarks/report.py runs/sim --out docs/img``; see docs/benchmarks.md.
"""
