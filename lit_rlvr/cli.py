"""The ``lit-rlvr`` command: LightningCLI over GRPOModule and PromptDataModule.

    lit-rlvr fit --config configs/quickstart.yaml
    lit-rlvr fit --config configs/tiny.yaml --config configs/methods/greso.yaml

Configs are parsed in omegaconf+ mode: interpolations (``${model.rollout.num_generations}``,
absolute from the top of the config) are resolved once every config file and flag is
read, so ``--trainer.default_root_dir X`` moves the loggers' ``save_dir``, the checkpoints
under it and ``export_dir``, which the configs derive from ``${trainer.default_root_dir}``. Selection methods are listed under
``trainer.callbacks`` by class path, in the order they run. Unknown keys fail
at start-up, naming the key.
"""

from __future__ import annotations

import os
import warnings
from typing import Optional

from jsonargparse import set_parsing_settings
from lightning.pytorch.cli import LightningCLI

from lit_rlvr.data import PromptDataModule
from lit_rlvr.module import GRPOModule


class LitRLVRCLI(LightningCLI):
    """LightningCLI with lit-rlvr's defaults and start-up checks."""

    def before_instantiate_classes(self) -> None:
        config = self.config.get(self.subcommand, self.config) if self.subcommand else self.config
        trainer = config.get("trainer", {})
        accelerator = str(trainer.get("accelerator", "auto"))
        if accelerator in ("gpu", "cuda"):
            import torch

            if not torch.cuda.is_available():
                raise SystemExit(
                    f"trainer.accelerator={accelerator!r} but this machine has no CUDA GPU: "
                    "run a CPU config (configs/quickstart.yaml) or set --trainer.accelerator=cpu"
                )


def main(args: Optional[list[str]] = None) -> None:
    os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")
    # "omegaconf+" resolves after all configs and flags; configs' absolute paths resolve under the subcommand
    set_parsing_settings(omegaconf_absolute_to_relative_paths=True)
    # GRPOModule checkpoints after its optimizer steps on purpose (the state a resumed run continues from).
    warnings.filterwarnings("ignore", message="Using ModelCheckpoint with manual optimization")
    LitRLVRCLI(
        GRPOModule,
        PromptDataModule,
        parser_kwargs={"parser_mode": "omegaconf+"},
        save_config_kwargs={"overwrite": True},
        seed_everything_default=0,
        args=args,
    )


if __name__ == "__main__":
    main()
