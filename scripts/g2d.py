"""Run G2D (arXiv 2605.21266) end to end: K steps of GRPO warm-up, a harvest of preference pairs, offline DPO.

    python scripts/g2d.py --k 20                       # the quick-start model, outputs under runs/g2d
    python scripts/g2d.py --k 20 --dpo-from warmup     # DPO from the warm-up policy instead of the original
    python scripts/g2d.py --k 2 --overlay tests/configs/g2d_tiny --out runs/g2d_tiny   # seconds, tiny model

Each stage is an ordinary ``lit-rlvr`` command (printed as it starts); ``--warmup``, ``--harvest`` and
``--dpo`` pass extra flags to one stage (e.g. ``--harvest=--trainer.limit_predict_batches=2``).
Writes OUT/compute.json: every stage's generated, prefill, train and forward tokens, token passes, wall time.
"""

from __future__ import annotations

import argparse
import shlex

from lit_rlvr.g2d.pipeline import DPO_FROM, STAGES, run_pipeline


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--k", type=int, required=True, help="warm-up GRPO steps (0: harvest from the original model)")
    parser.add_argument("--out", default="runs/g2d", help="output folder (one subfolder per stage)")
    parser.add_argument("--configs", default="configs/g2d", help="folder of warmup.yaml, harvest.yaml, dpo.yaml")
    parser.add_argument("--overlay", default=None, help="folder of per-stage overlay configs applied after --configs")
    parser.add_argument("--dpo-from", choices=DPO_FROM, default="original", help="DPO's starting model")
    parser.add_argument("--stages", default=",".join(STAGES), help="comma-separated stages to run")
    for stage in STAGES:
        parser.add_argument(f"--{stage}", default="", help=f"extra lit-rlvr flags for the {stage} stage (one string)")
    args = parser.parse_args()
    extra = {s: shlex.split(getattr(args, s)) for s in STAGES}
    run_pipeline(args.k, args.out, args.configs, args.overlay, args.dpo_from, extra, args.stages.split(","))


if __name__ == "__main__":
    main()
