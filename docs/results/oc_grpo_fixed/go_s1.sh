#!/bin/bash
# seed_everything = 1 (LoRA's initial A matrices; data order and sampling seeds stay at 0), as the Adaptive table's seed 1
set -e
export OMP_NUM_THREADS=1
cd /work/main
O=runs/oc_fixed_budget
echo "s1 start $(date -u) load $(cat /proc/loadavg)" >> $O/machine.txt
.venv/bin/lit-rlvr oc-harvest --config configs/quickstart.yaml --config configs/oc_grpo/measure.yaml \
    --out $O/harvest_s1 --n 4 --limit 24 --batch 24 --seed_everything=1 > $O/harvest_s1.log 2>&1
echo "s1 harvest done $(date -u) load $(cat /proc/loadavg)" >> $O/machine.txt
H=$(.venv/bin/python -c "import json;print(json.load(open('$O/harvest_s1/summary.json'))['rollouts'])")
G=$(( (H + 8*16 + 15) / 16 ))
echo "s1 harvest rollouts $H; fixed 8 steps = $((H+128)); grpo steps $G" >> $O/machine.txt
.venv/bin/python -m lit_rlvr.cli fit --config configs/quickstart.yaml --config configs/oc_grpo/measure.yaml \
    --config configs/methods/oc_grpo_fixed.yaml --config $O/harvest_s1/data.yaml --seed_everything=1 \
    --trainer.default_root_dir=$O/fixed_s1 --trainer.max_steps=8 --trainer.val_check_interval=8 > $O/fixed_s1.log 2>&1
echo "s1 fixed done $(date -u) load $(cat /proc/loadavg)" >> $O/machine.txt
.venv/bin/python -m lit_rlvr.cli fit --config configs/quickstart.yaml --config configs/oc_grpo/measure.yaml --seed_everything=1 \
    --trainer.default_root_dir=$O/grpo_s1 --trainer.max_steps=$G --trainer.val_check_interval=$G > $O/grpo_s1.log 2>&1
echo "s1 grpo done $(date -u) load $(cat /proc/loadavg)" >> $O/machine.txt
