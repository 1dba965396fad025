"""The ``lit-rlvr`` command: LightningCLI over lit-rlvr's modules and data modules.

    lit-rlvr fit --config configs/quickstart.yaml
    lit-rlvr fit --config configs/tiny.yaml --config configs/methods/greso.yaml
    lit-rlvr predict --config configs/g2d/harvest.yaml      # G2D harvest
    lit-rlvr fit --config configs/g2d/dpo.yaml              # G2D DPO

``model.class_path`` picks the module (any ``PolicyModule``: GRPOModule, the default when a
config names none; ``lit_rlvr.dpo.DPOModule``; ``lit_rlvr.g2d.HarvestModule``) and
``data.class_path`` the data module (default ``PromptDataModule``).

Configs are parsed in omegaconf mode, so they can interpolate
(``${model.rollout.num_generations}``). Selection methods are listed under
``trainer.callbacks`` by class path, in the order they run. Unknown keys fail
at start-up, naming the key.
"""

from __future__ import annotations

import os
import warnings
from typing import Optional

from lightning.pytorch import LightningDataModule
from lightning.pytorch.cli import LightningCLI

from lit_rlvr.policy_module import PolicyModule


class LitRLVRCLI(LightningCLI):
    """LightningCLI with lit-rlvr's defaults and start-up checks."""

    def add_arguments_to_parser(self, parser) -> None:
        # subclass mode: a config without class_path means GRPO on prompts, as before
        if self.subclass_mode_model:
            parser.set_defaults({"model": {"class_path": "lit_rlvr.module.GRPOModule"}})
        if self.subclass_mode_data:
            parser.set_defaults({"data": {"class_path": "lit_rlvr.data.PromptDataModule"}})

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
    # GRPOModule checkpoints after its optimizer steps on purpose (the state a resumed run continues from).
    warnings.filterwarnings("ignore", message="Using ModelCheckpoint with manual optimization")
    LitRLVRCLI(
        PolicyModule,
        LightningDataModule,
        subclass_mode_model=True,
        subclass_mode_data=True,
        parser_kwargs={"parser_mode": "omegaconf"},
        save_config_kwargs={"overwrite": True},
        seed_everything_default=0,
        args=args,
    )


if __name__ == "__main__":
    main()
