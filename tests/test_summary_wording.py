"""The end-of-fit summary and ``lit-rlvr report`` say what they measured: why a fit has no final evaluation,
which count of useful rollouts is which, which run the report read, and how much longer a run needs for revisits."""

from types import SimpleNamespace

import pytest

from lit_rlvr.run.cli import main
from lit_rlvr.report.plot import which_run
from lit_rlvr.report.selection_report import MIN_REVISITS, oracle_ratio, selection_stats, verdict
from lit_rlvr.report.summary import RunSummary
from tests.test_selection_report import RECORDS, _train


def _trainer(val_check_interval=20, max_steps=3):
    return SimpleNamespace(val_check_interval=val_check_interval, max_steps=max_steps, limit_val_batches=1, global_step=3,
                           callback_metrics={}, loggers=[], checkpoint_callbacks=[])


def _module(steps=3):
    totals = SimpleNamespace(rollouts_generated=1280, rollouts_effective=656, rollouts_in_gradient=644,
                             tokens_generated=9000, rollouts_pruned=0, reward_errors=0, reward_timeouts=0)
    return SimpleNamespace(steps_done=steps, totals=totals, export_dir=None)


# evaluated before training only: the fit (3 steps) ended before val_check_interval (20)
SHORT = [{"step": 0.0, "val/pass@1": 0.2}, _train(0, 16, 8), _train(1, 32, 12), _train(2, 48, 16)]


def test_a_fit_shorter_than_val_check_interval_says_why_it_has_no_final_evaluation():
    # before: "after" and "-" with no reason
    text = "\n".join(RunSummary.lines(_trainer(), _module(), SHORT, None))
    assert ("no evaluation after training: validation runs every trainer.val_check_interval=20 steps and this fit "
            "ran 3; set --trainer.val_check_interval=3") in text


def test_the_oracle_does_not_compare_a_final_accuracy_that_was_never_measured():
    # before: "final accuracy no better than the first" with no evaluation after training
    o = oracle_ratio(SHORT)
    assert "no held-out evaluation after training" in o.describe() and "no better than the first" not in o.describe()
    assert o.counts() == "16 rollouts in groups with reward variance (effective) against 48 generated"


def test_the_summary_names_both_counts_of_useful_rollouts():
    # before: "1280 generated, 644 in the gradient" beside the report's "656 against 1280", unexplained
    text = "\n".join(RunSummary.lines(_trainer(), _module(), SHORT, None))
    assert ("1280 generated, 656 in groups with reward variance (effective), 644 of them with a non-zero advantage "
            "(in the gradient, 50%)") in text


def test_the_revisit_hint_says_how_many_more_steps():
    # before: "(it needs 20; train longer)"
    s = selection_stats([r for r in RECORDS if r.step == 0])  # one step of 4 groups, no revisits
    s.all_right, s.all_wrong = 0.25, 0.25  # enough zero variance to name a family
    s.num_train = 1000  # 1000 + MIN_REVISITS groups at 4 a step: 255 steps
    v = verdict(s)
    assert f"only 0 groups revisited a prompt (it needs {MIN_REVISITS}; train about 254 more steps, to step 255" in v
    s.num_train = None  # unknown data size: a lower bound from the prompts seen
    assert "train at least 5 more steps, to step 6" in verdict(s)


def _versions(tmp_path, *names):
    for name in names:
        (tmp_path / "csv" / name).mkdir(parents=True)
        (tmp_path / "csv" / name / "metrics.csv").write_text("step,reward/mean\n0,0.5\n")


def test_the_report_says_which_run_it_read_and_how_to_pick_another(tmp_path, capsys):
    # before: the newest version, silently
    _versions(tmp_path, "version_0", "version_1")
    line = which_run(tmp_path, tool="report")
    assert line.endswith(f"csv/version_1 (the newest of 2: version_0, version_1; another: lit-rlvr report {tmp_path} --version N)")
    assert "(named by --version" in which_run(tmp_path, 0, tool="report") and line.startswith("read ")
    with pytest.raises(SystemExit):  # no groups.csv there; the line comes first
        main(["report", str(tmp_path)])
    assert "lit-rlvr report: read " in capsys.readouterr().out
