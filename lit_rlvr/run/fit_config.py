"""The classes a fit's configs name, built as ``lit-rlvr fit`` builds them, without fitting.

The user tools that start from a run's configs (``lit-rlvr probe``, ``oc-harvest``, ``arrol-vote``)
read them through ``LitRLVRCLI`` itself, so every form a fit accepts works for them too: a model
with or without ``class_path``/``init_args``, omegaconf interpolations, several ``--config`` files
and ``--key=value`` flags, and the same start-up checks and messages.
"""

from __future__ import annotations

import warnings
from typing import Any, Sequence

__all__ = ["build_fit", "config_args"]


def config_args(configs: Sequence[str], overrides: Sequence[str] = ()) -> list[str]:
    """``--config c`` for each config, in order, then the flags; the tools never log."""
    return [a for c in configs for a in ("--config", str(c))] + ["--trainer.logger=false", *overrides]


def build_fit(args: Sequence[str]) -> Any:
    """A ``LitRLVRCLI`` that parsed ``args`` and built the trainer, module and data module (nothing loaded or set up)."""
    from jsonargparse import set_parsing_settings
    from lightning.pytorch import LightningDataModule

    from lit_rlvr.run.cli import LitRLVRCLI
    from lit_rlvr.policy_module import PolicyModule

    set_parsing_settings(omegaconf_absolute_to_relative_paths=True)
    warnings.filterwarnings("ignore", message="LightningCLI's args parameter")
    return LitRLVRCLI(
        PolicyModule, LightningDataModule, subclass_mode_model=True, subclass_mode_data=True, run=False,
        parser_kwargs={"parser_mode": "omegaconf+"}, save_config_callback=None, seed_everything_default=0, args=list(args),
    )
