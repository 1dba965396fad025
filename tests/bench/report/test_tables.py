"""Markdown tables: groups with reward variance per 1,000 rollouts."""

import pandas as pd
import pytest

from lit_rlvr.bench.report.numbers import variance_groups_per_1k
from lit_rlvr.report.curves import Run
from lit_rlvr.bench.report.tables import variance_groups_table


def test_groups_with_variance_per_1k_rollouts_and_its_table():
    def run(strategy, seed, mixed_per_step):
        rows = [{"step": i, "groups/generated": 8.0, "groups/solve_all": 1.0, "groups/solve_none": 7.0 - m,
                 "rollouts/generated": 64.0} for i, m in enumerate(mixed_per_step)]
        rows.append({"step": len(rows) - 1, "val/pass@1": 0.5})  # an evaluation row: not a training row
        return Run(f"{strategy}/{seed}", strategy, seed, pd.DataFrame(rows))

    grpo = [run("grpo", "0", [1, 1]), run("grpo", "1", [2, 2])]  # 2 and 4 mixed groups per 128 rollouts
    greso = [run("greso", "0", [2, 2]), run("greso", "1", [4, 4, 4])]
    assert variance_groups_per_1k(grpo[0]) == pytest.approx(1000 * 2 / 128)
    assert variance_groups_per_1k(greso[1]) == pytest.approx(1000 * 12 / 192)
    table = variance_groups_table(grpo + greso + [run("oracle", "0", [8])], references=("grpo",))
    lines = table.splitlines()
    assert lines[0] == "| strategy | groups with variance per 1,000 rollouts | × grpo | optimizer steps |"
    assert lines[2] == "| greso | 46.9 ± 22.1 | 2.00 ± 0.00 | 2–3 |"  # 31.25 and 62.5; per-seed ratios 2.0 and 2.0
    assert lines[3] == "| grpo | 23.4 ± 11.0 | 1.00 ± 0.00 | 2 |"
    assert not any("oracle" in line for line in lines)  # the hindsight oracle recounts rollouts: left out
