"""lit_rlvr.bench.step_readouts: accuracy at equal optimizer steps and prompt recurrence, from result files."""

import math

import pytest

from lit_rlvr.bench.result_report import make_results_report, runs_from_results, selection_csv_path
from lit_rlvr.bench.results import write_result
from lit_rlvr.bench.step_readouts import accuracy_at_step, recurrence, steps_done, steps_table

METRIC = "heldout_prompts/pass@1"


def _result(strategy, seed, points):
    """``points``: (step index of the last training step, cumulative rollouts, accuracy) per evaluation."""
    evals = [{"step": s, "rollouts": float(r), "train_seconds": float(r) / 10, METRIC: a} for s, r, a in points]
    return {"format": 1, "strategy": strategy, "seed": seed, "settings": {}, "wall_seconds": 1.0,
            "steps": points[-1][0] + 1, "rollouts_generated": float(points[-1][1]), "evals": evals, "groups": {}}


def _selection(path, rows):
    path.write_text("step,epoch,prompt_id,status\n" + "".join(f"{s},{s},{p},{st}\n" for s, p, st in rows))


@pytest.fixture
def results(tmp_path):
    d = tmp_path / "results"
    # GRPO: 64 rollouts a step, evaluations every 2 steps
    write_result(d, _result("grpo", 0, [(0, 0, 0.0), (1, 128, 0.2), (3, 256, 0.4), (5, 384, 0.6)]))
    # a refilling strategy: 128 rollouts a step; two evaluations within its first step
    write_result(d, _result("dynamic_sampling", 0, [(0, 0, 0.0), (0, 64, 0.0), (0, 128, 0.3), (1, 256, 0.5), (2, 384, 0.7)]))
    _selection(selection_csv_path(d, "grpo", 0), [(0, 0, "hard"), (0, 1, "effective"), (1, 0, "effective"),
                                                  (2, 0, "easy"), (2, 1, "hard"), (3, 2, "skipped")])
    _selection(selection_csv_path(d, "dynamic_sampling", 0), [(0, 0, "hard"), (0, 1, "unused"), (1, 2, "effective")])
    return d


def _runs(results):
    return {r.strategy: r for r in runs_from_results(results)}


def test_steps_done_counts_the_evaluation_before_training_as_zero(results):
    runs = _runs(results)
    assert list(steps_done(runs["grpo"])) == [0, 2, 4, 6]
    assert list(steps_done(runs["dynamic_sampling"])) == [0, 1, 1, 2, 3]


def test_accuracy_at_step_interpolates_in_steps_and_never_extrapolates(results):
    runs = _runs(results)
    assert accuracy_at_step(runs["grpo"], METRIC, 3) == pytest.approx(0.3)
    assert accuracy_at_step(runs["grpo"], METRIC, 6) == pytest.approx(0.6)
    assert math.isnan(accuracy_at_step(runs["grpo"], METRIC, 7))
    # two evaluations after one step: the later one (0.3) is the accuracy after that step
    assert accuracy_at_step(runs["dynamic_sampling"], METRIC, 1) == pytest.approx(0.3)
    assert accuracy_at_step(runs["dynamic_sampling"], METRIC, 3) == pytest.approx(0.7)
    assert math.isnan(accuracy_at_step(runs["grpo"], "missing/metric", 1))


def test_recurrence_counts_rolled_out_groups_only(results):
    runs = _runs(results)
    # prompt 0: hard, effective, easy = 3 visits; prompt 1: 2; prompt 2: skipped only = 0
    assert recurrence(runs["grpo"], [0, 1, 2]) == {"median": 2.0, "min": 0.0, "share_3plus": pytest.approx(1 / 3)}
    # 'unused' is not a rollout: prompt 1 has 0 visits
    assert recurrence(runs["dynamic_sampling"], [0, 1, 2])["min"] == 0.0
    assert recurrence(runs["dynamic_sampling"], [0, 1, 2])["median"] == 1.0


def test_steps_table_compares_at_the_fewest_steps_any_run_made(results):
    runs = runs_from_results(results)
    table, numbers = steps_table(runs, METRIC, order=["grpo", "dynamic_sampling"])
    assert numbers["at_step"] == 3 and numbers["training_prompts"] == 3
    ds = numbers["strategies"]["dynamic_sampling"]
    assert ds["steps"]["mean"] == 3 and ds["rollouts_per_step"]["mean"] == pytest.approx(128)
    assert ds["accuracy"]["mean"] == pytest.approx(0.7)
    assert ds["minus_grpo"]["mean"] == pytest.approx(0.4)  # GRPO after 3 steps: 0.3
    assert numbers["strategies"]["grpo"]["minus_grpo"] is None
    assert "| dynamic_sampling | 1 | 3.0 | 128 | 0.700 | +0.400 | 1.0 | 0% |" in table
    assert "| grpo | 1 | 6.0 | 64 | 0.300 | – | 2.0 | 33% |" in table
    _, at5 = steps_table(runs, METRIC, at_step=5)
    assert math.isnan(at5["strategies"]["dynamic_sampling"]["accuracy"]["mean"])  # past its last evaluation


def test_the_results_report_writes_steps_md(results, tmp_path):
    rep = make_results_report(results, tmp_path / "out", targets=[0.5], strategies=["grpo", "dynamic_sampling"], seeds=[0])
    assert "steps.md" in rep["files"]
    assert "accuracy after 3 steps" in (tmp_path / "out" / "steps.md").read_text()
