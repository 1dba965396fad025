"""lit_rlvr.bench.results: the per-(strategy, seed) result files that make bench_real.py resumable."""

import json
import math

import pandas as pd
import pytest

from lit_rlvr.bench.results import is_done, load_results, result_path, summarize_run, write_result

SETTINGS = {"config": "smollm2.yaml", "config_sha256": "abc", "budget": 32, "eval_every_rollouts": 16, "policy": "config"}


def _metrics() -> pd.DataFrame:
    nan = math.nan
    rows = [  # an evaluation before training, two training steps of 16 rollouts, an evaluation after each
        {"step": 0, "train_prompts/pass@1": 0.25, "heldout_prompts/pass@1": 0.125, "cumulative/rollouts_generated": 0.0},
        {"step": 0, "rollouts/generated": 16.0, "cumulative/rollouts_generated": 16.0, "cumulative/rollouts_effective": 8.0, "groups/generated": 2.0,
         "groups/solve_all": 0.0, "groups/solve_none": 1.0, "time/rollout_s": 1.0, "time/reward_s": 0.5, "time/update_s": 2.0},
        {"step": 0, "train_prompts/pass@1": 0.5, "heldout_prompts/pass@1": 0.25, "cumulative/rollouts_generated": 16.0},
        {"step": 1, "rollouts/generated": 16.0, "cumulative/rollouts_generated": 32.0, "cumulative/rollouts_effective": 24.0, "groups/generated": 2.0,
         "groups/solve_all": 0.0, "groups/solve_none": 0.0, "time/rollout_s": 1.0, "time/reward_s": 0.5, "time/update_s": 1.0},
        {"step": 1, "train_prompts/pass@1": 0.75, "heldout_prompts/pass@1": 0.375, "cumulative/rollouts_generated": 32.0},
    ]
    return pd.DataFrame(rows).reindex(columns=sorted({k for r in rows for k in r}, key=lambda c: c != "step"), fill_value=nan)


def test_summarize_run_reads_evals_groups_and_times():
    res = summarize_run(_metrics(), "grpo", 0, SETTINGS, wall_seconds=12.34)
    assert res["strategy"] == "grpo" and res["seed"] == 0 and res["settings"] == SETTINGS
    assert res["wall_seconds"] == 12.3 and res["steps"] == 2 and res["rollouts_generated"] == 32.0
    assert [e["rollouts"] for e in res["evals"]] == [0.0, 16.0, 32.0]
    assert [e["heldout_prompts/pass@1"] for e in res["evals"]] == [0.125, 0.25, 0.375]
    # training seconds of the training steps within each evaluation's rollouts (rollout + reward + update)
    assert [e["train_seconds"] for e in res["evals"]] == [0.0, 3.5, 6.0]


def test_summarize_run_records_tokens_generated_where_logged():
    df = _metrics()
    assert "tokens_generated" not in summarize_run(df, "grpo", 0, SETTINGS, wall_seconds=1.0)["evals"][0]
    df["cumulative/tokens_generated"] = [math.nan, 100.0, math.nan, 180.0, math.nan]  # on the training rows
    res = summarize_run(df, "grpo", 0, SETTINGS, wall_seconds=1.0)
    assert [e["tokens_generated"] for e in res["evals"]] == [0.0, 100.0, 180.0]


def test_summarize_run_keeps_per_part_accuracies():
    df = _metrics()
    df["heldout_prompts/pass@1/easy"] = [1.0, math.nan, 0.5, math.nan, 0.75]
    res = summarize_run(df, "grpo", 0, SETTINGS, wall_seconds=1.0)
    assert [e["heldout_prompts/pass@1/easy"] for e in res["evals"]] == [1.0, 0.5, 0.75]
    assert [e["heldout_prompts/pass@1"] for e in res["evals"]] == [0.125, 0.25, 0.375]


def test_train_seconds_do_not_depend_on_the_csv_row_order():
    # RolloutEval writes its row straight to the logger: in the CSV it can come before its step's training row
    df = _metrics()
    df = df.iloc[[0, 2, 1, 4, 3]].reset_index(drop=True)
    res = summarize_run(df, "grpo", 0, SETTINGS, wall_seconds=1.0)
    assert [e["rollouts"] for e in res["evals"]] == [0.0, 16.0, 32.0]
    assert [e["train_seconds"] for e in res["evals"]] == [0.0, 3.5, 6.0]
    assert [e["rollouts_effective"] for e in res["evals"]] == [0.0, 8.0, 24.0]
    g = res["groups"]
    assert g["groups_generated"] == 4.0 and g["rollouts_generated"] == 32.0
    assert g["with_variance_per_1k_rollouts"] == pytest.approx(1000 * 3 / 32)
    json.dumps(res)  # plain JSON


def test_done_only_with_the_same_settings(tmp_path):
    assert not is_done(tmp_path, "grpo", 0, SETTINGS)
    path = write_result(tmp_path, summarize_run(_metrics(), "grpo", 0, SETTINGS, 1.0))
    assert path == result_path(tmp_path, "grpo", 0) and path.name == "grpo_seed0.json"
    assert is_done(tmp_path, "grpo", 0, SETTINGS)
    assert not is_done(tmp_path, "grpo", 1, SETTINGS) and not is_done(tmp_path, "dps", 0, SETTINGS)
    with pytest.raises(ValueError, match="other settings"):
        is_done(tmp_path, "grpo", 0, {**SETTINGS, "budget": 64})
    assert [r["strategy"] for r in load_results(tmp_path)] == ["grpo"]
    assert not list(tmp_path.glob("*.tmp"))


def test_noise_rows_are_kept_under_the_current_names_from_old_or_resumed_files():
    """A metrics file of before the rename (noise/units_*), or of a run resumed across it (both, each on its rows)."""
    df = _metrics()
    df["noise/g2_all"] = [math.nan, 2.0, math.nan, 3.0, math.nan]
    df["noise/units_all"] = [math.nan, 2.0, math.nan, math.nan, math.nan]
    df["noise/groups_all"] = [math.nan, math.nan, math.nan, 2.0, math.nan]
    noise = summarize_run(df, "grpo", 0, SETTINGS, wall_seconds=1.0)["noise"]
    assert noise == [{"step": 0, "noise/g2_all": 2.0, "noise/groups_all": 2.0},
                     {"step": 1, "noise/g2_all": 3.0, "noise/groups_all": 2.0}]
