"""lit-rlvr: a PyTorch Lightning trainer for RL from verifiable rewards (GRPO and relatives)."""

__version__ = "0.1.0"
