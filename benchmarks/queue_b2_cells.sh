#!/bin/bash
# Run it in the background (nohup bash benchmarks/queue_b2_cells.sh &): it skips finished cells (their result file
# exists), resumes a cut-short one, and commits nothing. CELLS="vigor+b2:1 ..." picks the cells.
# The 2-prompt selector queue (docs/benchmarks.md, "Selection against tuned GRPO"): one cell at a time, one thread,
# each from a snapshot of the committed HEAD at its first start (others' uncommitted edits stay out; a resumed cell
# reuses its snapshot, so its arguments match and it resumes from its checkpoint). Log: $WORK/queue.log.
# Pilot-Commit cells wait for a tree without uncommitted Pilot-Commit edits (another helper changes its buffer):
# while there are some, the cell is deferred to the end of the queue.
MAIN=$(cd "$(dirname "$0")/.." && pwd)
WORK=${WORK:-$MAIN/runs/queue_b2}  # snapshots and the log (runs/ is not committed)
mkdir -p "$WORK"
RUNS=$MAIN/runs/bench_real_smollm2_mixed_b2
CELLS=${CELLS:-"mopps+b2:0 greso+skip_b2:0 dps+b2:0 grpo+b2@cpu:0 vigor+b2:0 dynamic_sampling+b2:0 grpo+b2@cpu:1 grpo+b2@cpu:2 pilot_commit+b2:0
  mopps+b2:1 greso+skip_b2:1 dps+b2:1 vigor+b2:1 dynamic_sampling+b2:1 pilot_commit+b2:1
  mopps+b2:2 greso+skip_b2:2 dps+b2:2 vigor+b2:2 dynamic_sampling+b2:2 pilot_commit+b2:2"}
log() { echo "$(date -u +%FT%TZ) $*" >> $WORK/queue.log; }
pilot_clean() { git -C $MAIN diff --quiet HEAD -- lit_rlvr/callbacks/ configs/methods/pilot_commit.yaml; }
run_cell() {
  local strat=${1%%:*} seed=${1##*:} results=$MAIN/docs/results/bench_real/smollm2_mixed_b2
  if [[ $strat == *@cpu ]]; then strat=${strat%@cpu}; results=${results}_cpu; fi  # tuned GRPO re-run with the CPU clock
  local name=${strat}_seed$seed snap=$WORK/snap/${strat}_seed$seed
  [ -f $results/$name.json ] && { log "$name: done, skipped"; return 0; }
  if [ ! -f $snap/COMMIT ]; then
    rm -rf $snap && mkdir -p $snap && git -C $MAIN archive HEAD | tar -x -C $snap && git -C $MAIN rev-parse HEAD > $snap/COMMIT
  fi
  log "$name: start (commit $(cat $snap/COMMIT), load $(cut -d' ' -f1-3 /proc/loadavg))"
  (cd $snap && OMP_NUM_THREADS=1 PYTHONPATH=$snap $MAIN/.venv/bin/python benchmarks/bench_real.py \
      --config $snap/configs/bench/smollm2_mixed.yaml --out $RUNS run --no-warm --budget 1920 --eval-every-rollouts 192 \
      --eval-prompts val --jobs 1 --checkpoint-every 2 --seeds $seed --only $strat --results $results) >> $WORK/queue.log 2>&1
  log "$name: exit $?"
}
# one cell at a time: wait for any bench_real cell still running (a restarted queue)
while pgrep -f "bench_real.py --config $WORK/snap/" > /dev/null; do sleep 30; done
DEFER=""
for cell in $CELLS; do
  if [[ $cell == pilot_commit* ]] && [ ! -f $WORK/snap/${cell%%:*}_seed${cell##*:}/COMMIT ] && ! pilot_clean; then
    log "$cell: Pilot-Commit files have uncommitted edits: deferred to the end"; DEFER="$DEFER $cell"; continue
  fi
  run_cell $cell
done
for cell in $DEFER; do
  for i in $(seq 24); do pilot_clean && break; log "$cell: still uncommitted Pilot-Commit edits, waiting"; sleep 300; done
  run_cell $cell
done
log "queue finished"
