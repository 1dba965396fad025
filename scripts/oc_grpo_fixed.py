"""OC-GRPO-Fixed's offline harvest: never-solved problems, the prefix cascade, original + guided rows.

    python scripts/oc_grpo_fixed.py harvest --config configs/quickstart.yaml --out runs/oc_fixed --n 8
    lit-rlvr fit --config configs/quickstart.yaml --config configs/methods/oc_grpo_fixed.yaml \
        --config runs/oc_fixed/data.yaml

(``lit_rlvr.oc_fixed``; docs/oc_grpo.md, "The Fixed variant").
"""

import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from lit_rlvr.oc_fixed import main  # noqa: E402

if __name__ == "__main__":
    main()
