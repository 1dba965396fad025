"""The selection contract's old address: re-exports ``lit_rlvr.selection`` and the records.

The contract lives in ``lit_rlvr.selection`` (stage bases, ``check_composition``, seeds and
ranks) and its records in ``lit_rlvr.types``; this module keeps ``from lit_rlvr.callbacks.base
import ...`` working. New code imports from ``lit_rlvr.selection``: importing this module
imports the ``lit_rlvr.callbacks`` package, and with it every method.
"""

from lit_rlvr.selection import *  # noqa: F401,F403  (every name of selection.__all__)
from lit_rlvr.selection import __all__  # noqa: F401
