#!/bin/bash
# The 2-prompt selector queue (docs/benchmarks/tuned_selection.md): benchmarks/queue_cells.sh with regime B's settings.
# Run it in the background (nohup bash benchmarks/queue_b2_cells.sh &); finished cells are skipped, a cut-short one
# resumes. CELLS="vigor+b2:1 ..." picks the cells; <strategy>@cpu:<seed> writes to smollm2_mixed_b2_cpu (tuned GRPO
# re-run with the CPU clock). Log: runs/queue_b2/queue.log.
MAIN=$(cd "$(dirname "$0")/.." && pwd)
export QUEUE=b2 CONFIG=configs/bench/smollm2_mixed.yaml BUDGET=1920 EVERY=192
export RESULTS=$MAIN/docs/results/bench_real/smollm2_mixed_b2 RUNS=$MAIN/runs/bench_real_smollm2_mixed_b2
export CELLS=${CELLS:-"mopps+b2:0 greso+skip_b2:0 dps+b2:0 grpo+b2@cpu:0 vigor+b2:0 dynamic_sampling+b2:0 grpo+b2@cpu:1
  grpo+b2@cpu:2 pilot_commit+b2:0 mopps+b2:1 greso+skip_b2:1 dps+b2:1 vigor+b2:1 dynamic_sampling+b2:1 pilot_commit+b2:1
  mopps+b2:2 greso+skip_b2:2 dps+b2:2 vigor+b2:2 dynamic_sampling+b2:2 pilot_commit+b2:2"}
exec bash "$MAIN/benchmarks/queue_cells.sh"
