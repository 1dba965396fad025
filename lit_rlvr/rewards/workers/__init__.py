"""The reward sandbox: where reward code and model output run, apart from what a reward computes.

``pool``: ``TimeLimitedCaller``, a pool of sandboxed worker processes, each call under a hard time limit;
``batch_loop``: how a batch of calls is dispatched, waited on and ended; ``process``: one worker seen
from the trainer; ``zygote``: the worker itself (confine, import the reward, fork one process per call);
``protocol``: what crosses between them (requests are pickles of the trainer's data, replies are JSON);
``confinement``: limits, Landlock, namespaces, and installing ``seccomp``'s filter; ``settings``: the run's sandbox settings (one memory
budget, a clean environment, what workers may read); ``output_relay``: workers' output to the log;
``parked``: idle zygotes kept for the next reward with the same settings; ``workdirs``: their directories.
docs/security.md says what is enforced on which kernel.
"""
