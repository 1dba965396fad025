"""G2D (arXiv 2605.21266): a short GRPO warm-up, a harvest of preference pairs, offline DPO.

- stage 1, warm-up: ``GRPOModule`` for K steps (``lit-rlvr fit --config configs/g2d/warmup.yaml``);
- stage 2, harvest: ``HarvestModule`` + ``PreferenceWriter`` in Lightning's predict loop
  (``lit-rlvr predict --config configs/g2d/harvest.yaml``);
- stage 3, DPO: ``lit_rlvr.dpo.DPOModule`` on a ``PreferenceDataModule``
  (``lit-rlvr fit --config configs/g2d/dpo.yaml``);
- ``ComputeMeter`` counts every stage in one unit; ``lit_rlvr.g2d.pipeline`` runs all three.
"""

from lit_rlvr.g2d.compute import Compute, ComputeMeter
from lit_rlvr.g2d.harvest import HarvestModule, HarvestRecord
from lit_rlvr.g2d.pairs import extreme_pairs, random_pairs
from lit_rlvr.g2d.preferences import PreferenceBatch, PreferenceDataModule, PreferencePair, load_preferences
from lit_rlvr.g2d.writer import NoMixedPrompts, PreferenceWriter

__all__ = [
    "Compute",
    "ComputeMeter",
    "HarvestModule",
    "HarvestRecord",
    "NoMixedPrompts",
    "PreferenceBatch",
    "PreferenceDataModule",
    "PreferencePair",
    "PreferenceWriter",
    "extreme_pairs",
    "load_preferences",
    "random_pairs",
]
