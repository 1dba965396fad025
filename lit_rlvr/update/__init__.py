"""Stage 7, the update, in three parts with one job each.

* ``plan``: which kept rows enter forward/backward, and in which micro-batches (``plan_update``).
* ``prefix``: log-probs with each distinct prompt of a micro-batch run once (``shared_prompt_logprobs``).
* ``step``: ``Updater``, which owns the step: collate, normalise, plan, forward/backward, optimizer steps.

Row collation (``lit_rlvr.collate``) is shared with DPO and stays outside the package.
"""

from lit_rlvr.update.plan import UpdatePlan, carries_gradient, pack_by_tokens, plan_update, trim_padding
from lit_rlvr.update.step import UpdateHost, Updater

__all__ = ["UpdateHost", "UpdatePlan", "Updater", "carries_gradient", "pack_by_tokens", "plan_update", "trim_padding"]
