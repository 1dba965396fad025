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

from lit_rlvr.checkpointing import AtomicCheckpointIO, InvalidCheckpointError
from lit_rlvr.data import PromptDataModule
from lit_rlvr.module import GRPOModule


class LitRLVRCLI(LightningCLI):
    """LightningCLI with lit-rlvr's defaults and start-up checks."""

    def _parse_ckpt_path(self) -> None:
        """LightningCLI reads --ckpt_path here (for hyperparameters) with a bare torch.load; when that fails,
        say which file is broken and what to do instead of torch's EOFError or its weights_only=False advice."""
        try:
            super()._parse_ckpt_path()
        except Exception:
            path = self.config[self.config.subcommand].get("ckpt_path")
            try:
                AtomicCheckpointIO().load_checkpoint(path)
            except InvalidCheckpointError as e:
                raise e from None  # the message names the file; torch's traceback would only mislead
            raise

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
