"""``lit_rlvr.bench.report`` still exports every name it did as one module, and the report's CLI script imports."""

import lit_rlvr.bench.report as rep

USED_ELSEWHERE = [  # result_report.py, sim/compare.py, benchmarks/ and docs
    "CUM_EFF", "CUM_GEN", "GROUP_COLUMNS", "Run", "STATUS_CODES", "STATUS_COLORS", "accuracy_curve", "auto_target",
    "find_runs", "hindsight_oracle", "load_selection", "make_report", "markdown_table", "plot_accuracy", "plot_per_step",
    "plot_selection_heatmaps", "rollouts_to_target", "selection_matrix", "summarize", "variance_groups_per_1k",
    "variance_groups_table",
]


def test_the_package_re_exports_every_name():
    assert rep.__all__ == ["Run", "accuracy_curve", "find_runs", "hindsight_oracle", "make_report", "markdown_table",
                           "rollouts_to_target", "summarize"]
    missing = [n for n in USED_ELSEWHERE if not hasattr(rep, n)]
    assert not missing

