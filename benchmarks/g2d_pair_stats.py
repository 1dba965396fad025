"""What G2D's harvested pairs contrast (docs/g2d.md): per K, the share of pairs whose REJECTED candidate
still contains the right sum as a number (wrong only because another number came last, the reward reads
the last number), and the share of chosen/rejected candidates cut at the token cap.

    python benchmarks/g2d_pair_stats.py runs/bench_g2d/k0 runs/bench_g2d/k5 runs/bench_g2d/k10
"""
import json, re, sys
from pathlib import Path

out = {}
for run in sys.argv[1:]:
    rows = [json.loads(l) for l in (Path(run) / "harvest" / "pairs.jsonl").read_text().splitlines() if l.strip()]
    has = sum(str(r["answer"]) in re.findall(r"-?\d+", r["rejected"]) for r in rows)
    out[Path(run).name] = {
        "pairs": len(rows),
        "rejected_contains_answer": has / len(rows),
        "chosen_truncated": sum(r["chosen_truncated"] for r in rows) / len(rows),
        "rejected_truncated": sum(r["rejected_truncated"] for r in rows) / len(rows),
    }
print(json.dumps(out, indent=2))
