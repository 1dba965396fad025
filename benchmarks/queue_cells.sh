#!/bin/bash
# A queue of benchmark cells, one at a time, one thread each. Run it in the background:
#   QUEUE=controller CONFIG=configs/bench/smollm2.yaml BUDGET=1280 EVERY=128 \
#     CELLS="adaptive_batch:0 adaptive_batch:1" nohup bash benchmarks/queue_cells.sh &
# A cell is <strategy>:<seed>, or <strategy>@<tag>:<seed> to write its results to <RESULTS>_<tag> (a re-run beside
# the committed cells). It skips finished cells (their result file exists), resumes a cut-short one from its
# checkpoint, and commits nothing. Each cell runs from a snapshot of the committed HEAD at its first start
# (others' uncommitted edits stay out; a resumed cell reuses its snapshot, so its arguments match).
# EXTRA: more bench_real.py run arguments (e.g. "--group-value-every 4"). WARM: a model folder to train instead of
# the config's policy (bench_real's --warm; e.g. runs/gemma/hf, a dequantized model). Log: runs/queue_<QUEUE>/queue.log.
MAIN=$(cd "$(dirname "$0")/.." && pwd)
: "${QUEUE:?name the queue}" "${CONFIG:?the bench config}" "${CELLS:?the cells}"
BUDGET=${BUDGET:-1920} EVERY=${EVERY:-192}
NAME=$(basename "$CONFIG" .yaml)
RESULTS=${RESULTS:-$MAIN/docs/results/bench_real/$NAME}
WORK=${WORK:-$MAIN/runs/queue_$QUEUE}  # snapshots and the log (runs/ is not committed)
RUNS=${RUNS:-$MAIN/runs/bench_real_$NAME}
mkdir -p "$WORK"
log() { echo "$(date -u +%FT%TZ) $*" >> "$WORK/queue.log"; }
run_cell() {
  local strat=${1%%:*} seed=${1##*:} results=$RESULTS
  if [[ $strat == *@* ]]; then results=${RESULTS}_${strat##*@}; strat=${strat%@*}; fi
  local name=${strat}_seed$seed snap=$WORK/snap/${strat}_seed$seed
  [ -f "$results/$name.json" ] && { log "$name: done, skipped"; return 0; }
  if [ ! -f "$snap/COMMIT" ]; then
    rm -rf "$snap" && mkdir -p "$snap" && git -C "$MAIN" archive HEAD | tar -x -C "$snap" \
      && git -C "$MAIN" rev-parse HEAD > "$snap/COMMIT"
  fi
  log "$name: start (commit $(cat "$snap/COMMIT"), load $(cut -d' ' -f1-3 /proc/loadavg))"
  local model=(run --no-warm)
  [ -n "$WARM" ] && model=(--warm "$(cd "$MAIN" && realpath "$WARM")" run)
  (cd "$snap" && OMP_NUM_THREADS=1 PYTHONPATH=$snap "$MAIN/.venv/bin/python" benchmarks/bench_real.py \
      --config "$snap/$CONFIG" --out "$RUNS" "${model[@]}" --budget "$BUDGET" --eval-every-rollouts "$EVERY" \
      --eval-prompts val --jobs 1 --checkpoint-every 2 --seeds "$seed" --only "$strat" --results "$results" $EXTRA) \
      >> "$WORK/queue.log" 2>&1
  log "$name: exit $?"
}
# one cell at a time: wait for a cell of this queue still running (a restarted queue)
while pgrep -f "bench_real.py --config $WORK/snap/" > /dev/null; do sleep 30; done
for cell in $CELLS; do run_cell "$cell"; done
log "queue finished"
