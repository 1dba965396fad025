"""ARRoL at test time: pass@1, majority vote and quality-head-weighted vote over k samples per held-out prompt.

    python scripts/arrol_vote.py --ckpt runs/x/csv/version_0/checkpoints/last.ckpt \
        --config runs/x/csv/version_0/config.yaml --k 8

Prints the three numbers and writes a JSON with per-prompt answers, weights and votes
(``lit_rlvr.arrol_vote``; docs/arrol.md, "ARRoL at test time").
"""

import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from lit_rlvr.arrol_vote import main  # noqa: E402

if __name__ == "__main__":
    main()
