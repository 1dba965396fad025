"""The simulator's public names, kept here for existing callers: the code lives in ``lit_rlvr.bench.sim``
(one module per job; its package docstring describes the dynamics)."""

from lit_rlvr.bench.sim import *  # noqa: F401,F403
from lit_rlvr.bench.sim import __all__  # noqa: F401
