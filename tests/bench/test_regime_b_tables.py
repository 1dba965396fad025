"""benchmarks/regime_b_tables.py cells: one row per cell of a committed grid, from its result files alone."""

import json
from pathlib import Path

from tests.benchmark_scripts import load_benchmark

ROOT = Path(__file__).resolve().parents[2]
G32 = ROOT / "docs" / "results" / "bench_real" / "smollm2_mixed_g32"


def _script():
    return load_benchmark("regime_b_tables")


def test_cells_reproduce_the_committed_large_group_rows(tmp_path, capsys):
    save = tmp_path / "cells.json"
    _script().main(["--save", str(save), "cells", str(G32), "--targets", "0.5", "0.6"])
    out = capsys.readouterr().out
    # the row docs/benchmarks.md shows for GRPO seed 0 (rollouts to 0.50 / 0.60, final, steps, wall s, CPU s, B_noise,
    # f): a file from before CPU seconds were recorded has none
    assert "| grpo, seed 0 | 1,344 | 3,072 | 0.594 | 24 | 3,313 | – | 34.8 ± 28.2 | 0.48 |" in out
    cells = {(c["strategy"], c["seed"]): c for c in json.loads(save.read_text())["cells"]}
    pc = cells[("pilot_commit", 0)]
    assert pc["b_noise"] is None  # a selector's batch is not GRPO's: no noise scale shown
    assert 0.0 < pc["variance_share"] < 1.0  # its pilot groups count, all-wrong ones included
    assert out.index("| grpo, seed 0") < out.index("| vigor, seed 0") < out.index("| pilot_commit, seed 0")
