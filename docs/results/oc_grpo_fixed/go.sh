#!/bin/bash
set -e
export OMP_NUM_THREADS=1
cd /work/main
O=runs/oc_fixed_budget
echo "start $(date -u) load $(cat /proc/loadavg) nproc $(nproc)" > $O/machine.txt
.venv/bin/lit-rlvr oc-harvest --config configs/quickstart.yaml --config configs/oc_grpo/measure.yaml \
    --out $O/harvest --n 4 --limit 24 --batch 24 > $O/harvest.log 2>&1
echo "harvest done $(date -u) load $(cat /proc/loadavg)" >> $O/machine.txt
H=$(.venv/bin/python -c "import json;print(json.load(open('$O/harvest/summary.json'))['rollouts'])")
G=$(( (H + 8*16 + 15) / 16 ))
echo "harvest rollouts $H; fixed 8 steps = $((H+128)); grpo steps $G" >> $O/machine.txt
.venv/bin/python -m lit_rlvr.cli fit --config configs/quickstart.yaml --config configs/oc_grpo/measure.yaml \
    --config configs/methods/oc_grpo_fixed.yaml --config $O/harvest/data.yaml \
    --trainer.default_root_dir=$O/fixed --trainer.max_steps=8 --trainer.val_check_interval=8 > $O/fixed.log 2>&1
echo "fixed done $(date -u) load $(cat /proc/loadavg)" >> $O/machine.txt
.venv/bin/python -m lit_rlvr.cli fit --config configs/quickstart.yaml --config configs/oc_grpo/measure.yaml \
    --trainer.default_root_dir=$O/grpo --trainer.max_steps=$G --trainer.val_check_interval=$G > $O/grpo.log 2>&1
echo "grpo done $(date -u) load $(cat /proc/loadavg)" >> $O/machine.txt
