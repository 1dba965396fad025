#!/bin/bash
# Same numbers before and after a refactor: a tiny fit (3 steps, a mixed reward) of every method config at a base
# commit and at the working tree, then metrics.csv compared, every column but the times.
#   bash benchmarks/same_numbers.sh <base commit> [out dir]      (about 1 min a config on 2 cores)
set -u
MAIN=$(cd "$(dirname "$0")/.." && pwd)
BASE=$1 OUT=${2:-/tmp/same_numbers}
rm -rf "$OUT" && mkdir -p "$OUT"
git -C "$MAIN" worktree add -q "$OUT/base_tree" "$BASE"
cat > "$OUT/mixed.yaml" <<'YAML'
model:
  rewards:
    - class_path: lit_rlvr.rewards.CallableReward
      init_args: {fn: "tests.helpers:mostly_mixed_reward"}
YAML
for cfg in "$MAIN"/configs/methods/*.yaml; do
  name=$(basename "$cfg" .yaml)
  for side in base head; do
    tree=$MAIN; [ $side = base ] && tree=$OUT/base_tree
    mkdir -p "$OUT/$side/$name"
    (cd "$OUT/$side/$name" && OMP_NUM_THREADS=1 PYTHONPATH=$tree timeout 300 "$MAIN/.venv/bin/python" -c "
import sys
sys.argv = ['lit-rlvr', 'fit', '--config', '$tree/configs/tiny.yaml', '--config', '$tree/configs/methods/$name.yaml',
            '--config', '$OUT/mixed.yaml', '--trainer.max_steps=3', '--trainer.default_root_dir=run']
try:
    from lit_rlvr.run.launch import main
except ImportError:  # before the run wing
    from lit_rlvr.launch import main
sys.exit(main())" > log.txt 2>&1)
  done
done
git -C "$MAIN" worktree remove --force "$OUT/base_tree"
"$MAIN/.venv/bin/python" - "$OUT" <<'PY'
import csv, glob, os, sys
out = sys.argv[1]
for name in sorted(os.listdir(f"{out}/head")):
    a, b = (glob.glob(f"{out}/{side}/{name}/run/csv/version_*/metrics.csv") for side in ("base", "head"))
    if not (a and b):
        print(f"{name}: no metrics.csv (see {out}/*/{name}/log.txt)"); continue
    ra, rb = list(csv.DictReader(open(a[0]))), list(csv.DictReader(open(b[0])))
    timed = lambda k: k.startswith("time/") or k.endswith("_s") or k.endswith("_ms")  # noqa: E731
    cells = [(i, k) for i, (x, y) in enumerate(zip(ra, rb)) for k in set(x) | set(y) if not timed(k) and x.get(k) != y.get(k)]
    print(f"{name}: {len(ra)} rows, {len(ra[0])} columns: " + ("identical" if not cells and len(ra) == len(rb) else f"DIFFERENT {cells[:5]}"))
PY
