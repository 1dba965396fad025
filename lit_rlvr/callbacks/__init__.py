"""Selection methods as Lightning callbacks (configure under ``trainer.callbacks`` by class path).

Batch: AdaptiveBatch (sets each step's prompt batch). Pre-rollout: GRESO, MoPPS, DPS, LEEPS. Rollout allocators:
DynamicSampling, VIGOR, SARA, PilotCommit.
During rollout: ARRoL (a pruner). Pre-backward: DynamicSampling (zero-variance drop), PODS.
After reward (revise) and loss weights: OCGRPO, OCGRPOFixed. The contract is ``lit_rlvr.selection``
(its stage bases re-exported here beside the methods), its helpers
``lit_rlvr.selection_toolkit``; docs/writing_a_selector.md shows how to add a method.
"""

from types import ModuleType as _ModuleType

from lit_rlvr.selection import (
    FixedGroupAllocator,
    GroupReplacement,
    GroupReviser,
    PartialRollouts,
    PromptSelector,
    RolloutAllocator,
    RolloutFilter,
    RolloutPruner,
    RolloutState,
    Revision,
    SelectionCallback,
    TokenWeighter,
    gather_rows,
    group_observations,
    seeded_generator,
)
from lit_rlvr.callbacks.adaptive_batch import AdaptiveBatch
from lit_rlvr.callbacks.arrol import ARRoL
from lit_rlvr.callbacks.dps import DPS
from lit_rlvr.callbacks.dynamic_sampling import DynamicSampling
from lit_rlvr.callbacks.greso import GRESO
from lit_rlvr.callbacks.leeps import LEEPS
from lit_rlvr.callbacks.mopps import MoPPS
from lit_rlvr.callbacks.oc_fixed import OCGRPOFixed
from lit_rlvr.callbacks.oc_grpo import OCGRPO
from lit_rlvr.callbacks.pods import PODS
from lit_rlvr.callbacks.pilot_commit import PilotCommit
from lit_rlvr.callbacks.sara import SARA
from lit_rlvr.callbacks.vigor import VIGOR

__all__ = sorted(name for name, value in list(globals().items()) if not name.startswith("_") and not isinstance(value, _ModuleType))
"""Every class and helper imported above: a new method needs only its import line."""
