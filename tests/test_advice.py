"""The run's one piece of advice (lit_rlvr.report.advice): try a named setting, keep, or undecided; the end-of-fit summary
and ``lit-rlvr report`` of one run print the same lines."""

import csv
import math
from pathlib import Path
from types import SimpleNamespace

import pytest

from lit_rlvr.report.advice import HISTORY_CONFIG, REFILL_CONFIG, run_advice
from lit_rlvr.run.cli import main
from lit_rlvr.report.group_file import COLUMNS, RunFacts, read_facts, write_facts
from lit_rlvr.report.group_records import GroupRecorder
from lit_rlvr.critical_batch.levers import RunNoise
from lit_rlvr.report.plot import read_run
from lit_rlvr.report.selection_report import end_of_fit_lines

ROOT = Path(__file__).resolve().parents[1]


def _noise(b=10.0, se=1.0, per_step=5.0, share=0.4):
    return RunNoise(b_noise=b, b_noise_se=se, informative_per_step=per_step, share=share, steps=20)


def test_a_lever_whose_interval_is_below_one_is_named_with_its_exact_setting():
    # x = 40 / 10 = 4: half the batch (1 + 2) / 5 = 0.6, a quarter (1 + 1) / 5 = 0.4, both intervals below 1
    a = run_advice(_noise(per_step=40.0), facts=RunFacts(batch_size=8))
    assert a.call == "try" and a.setting == "--data.batch_size=2"
    assert a.line.startswith("try --data.batch_size=2 (GRPO at a quarter of the prompt batch): predicted 0.40x")
    assert "95% interval [0." in a.line
    # the bound is context, never the advice: perfect pre-selection at f = 0.4 is 0.4 (1 + 10) / 5 = 0.88
    assert any(c.startswith("bound (no method reaches it): perfect pre-selection (f 0.40 -> 1) 0.88x") for c in a.context)
    # a prompt batch of 2 cannot be quartered: half of it is what remains
    assert run_advice(_noise(per_step=40.0), facts=RunFacts(batch_size=2)).setting == "--data.batch_size=1"


def test_far_below_the_critical_batch_every_runnable_lever_costs_more_so_keep():
    # x = 0.5 / 50 = 0.01: the half batch is (1.005) / 1.01 < 1 but refill (1 + 0.01 / 0.4) / 1.01 > 1 ... with a tight
    # error the half batch's whole interval is below 1: so use f = 1 (no refill lever) and a batch of 1 (none smaller)
    a = run_advice(_noise(b=50.0, se=0.5, per_step=0.5, share=0.4), facts=RunFacts(batch_size=1))
    assert a.call == "keep" and a.line.startswith(f"keep this setting: every lever is predicted to need more rollouts "
                                                  f"(closest: --config {REFILL_CONFIG}")


def test_an_unavailable_noise_scale_error_is_undecided_and_no_interval_is_a_point():
    a = run_advice(_noise(se=math.nan), facts=RunFacts(batch_size=8))
    assert a.call == "undecided" and a.setting is None
    assert "standard error could not be computed, so no lever has an interval" in a.line
    assert "[interval n/a]" in " ".join(a.context) and "0.88-0.88" not in " ".join(a.context)
    for why in (None, RunNoise(math.nan, math.nan, 1.0, 0.5, steps=1)):  # no noise metrics; B_noise not measured
        assert run_advice(why, facts=RunFacts(batch_size=8)).call == "undecided"


def test_an_interval_that_reaches_one_is_undecided():
    # no informative group per step: x = 0, every lever exactly 1.0x, none below 1.0
    a = run_advice(_noise(per_step=0.0), facts=RunFacts(batch_size=8))
    assert a.call == "undecided" and "no lever's interval is wholly below or above 1.0" in a.line
    # a wide error still pays for a smaller batch: (1 + x/4)/(1 + x) < 1 at every x > 0
    assert run_advice(_noise(se=20.0), facts=RunFacts(batch_size=8)).call == "try"


def test_history_skipping_is_a_candidate_once_judged():
    # f 0.4 -> 0.9 at x = 0.01: (0.4 / 0.9)(1 + 0.01 * 0.9 / 0.4) / 1.01 = 0.45, below 1 whatever the error
    a = run_advice(_noise(b=50.0, se=0.5, per_step=0.5, share=0.4), history_f=0.9, facts=RunFacts(batch_size=1))
    assert a.call == "try" and a.setting == f"--config {HISTORY_CONFIG}" and (ROOT / HISTORY_CONFIG).is_file()
    assert (ROOT / REFILL_CONFIG).is_file()


def test_facts_round_trip(tmp_path):
    write_facts(tmp_path, SimpleNamespace(batch_size=8, num_train=1000))
    assert read_facts(tmp_path) == RunFacts(8, 1000) and read_facts(tmp_path / "none") == RunFacts()


def _run_folder(folder: Path, g2s=(2.0, 3.0, 2.5, 2.0, 3.5, 2.5), within: bool = False):
    """A run's version folder: metrics with noise-scale columns over 6 steps (|G|^2 ``g2s``; the names of before the
    rename, ``noise/units_*``, which are still read: ``noise_names``), 4 groups a step of 8
    prompts, data.json; ``within``: the split's column too (a fifth of each step's tr Σ within groups)."""
    folder.mkdir(parents=True)
    cols = ["step", "noise/units_all", "noise/units_informative", "noise/g2_informative", "noise/trace_informative",
            "noise/g2_all", "noise/trace_all", "noise/g2_informative_adam", "noise/trace_informative_adam", "val/pass@1"]
    cols += ["noise/trace_within_informative"] if within else []
    with open(folder / "metrics.csv", "w", newline="") as f:
        w = csv.writer(f)
        w.writerow(cols)
        w.writerow([0] + [""] * 8 + [0.1] + [""] * within)
        for step, g2 in enumerate(g2s):
            w.writerow([step, 4, 2, g2, 20 + 4 * step, g2, 40, g2, 20, ""] + [(20 + 4 * step) / (5 + step % 2)] * within)
        w.writerow([5] + [""] * 8 + [0.5] + [""] * within)
    with open(folder / "groups.csv", "w") as f:
        f.write(",".join(COLUMNS) + "\n")
        for step in range(6):
            for g in range(4):
                pid = (4 * step + g) % 8
                right = 4 if pid < 3 else 0 if pid < 5 else 2
                f.write(f"{step},{step // 2},{pid},4,{right},{0.0 if right < 4 else 1.0},{1.0 if right else 0.0}\n")
    write_facts(folder, SimpleNamespace(batch_size=4, num_train=8))


# a jackknife error; none (leaving out step 0's |G|^2 of 5 leaves a sum <= 0): undecided in both
@pytest.mark.parametrize("g2s, call", [((2.0, 3.0, 2.5, 2.0, 3.5, 2.5), "try --data.batch_size=1"),
                                       ((5.0, -1.0, -1.0, -1.0, -1.0, 0.5), "undecided: B_noise's standard error")])
def test_the_summary_and_the_report_of_one_run_give_the_same_advice(tmp_path, capsys, g2s, call):
    folder = tmp_path / "csv" / "version_0"
    _run_folder(folder, g2s)
    recorder = GroupRecorder(path=str(folder / "groups.csv"))
    summary = end_of_fit_lines(SimpleNamespace(callbacks=[recorder]), read_run(folder / "metrics.csv"))
    main(["report", str(tmp_path)])
    printed = capsys.readouterr().out.splitlines()
    shared = [line for line in summary if not line.startswith("  details")]
    assert printed[-len(shared):] == shared
    assert any(line.startswith(f"  advice                {call}") for line in shared)
    page = (folder / "selection_report.md").read_text()
    assert all(line.strip() in page for line in shared)
    assert "nan" not in "\n".join(summary) and "family to try" not in page


def test_with_the_split_the_group_size_lever_is_in_the_summary_and_the_report(tmp_path, capsys):
    folder = tmp_path / "csv" / "version_0"
    _run_folder(folder, within=True)
    summary = end_of_fit_lines(SimpleNamespace(callbacks=[GroupRecorder(path=str(folder / "groups.csv"))]),
                               read_run(folder / "metrics.csv"))
    main(["report", str(tmp_path)])
    printed = capsys.readouterr().out.splitlines()
    shared = [line for line in summary if not line.startswith("  details")]
    assert printed[-len(shared):] == shared
    assert any("within-group share w = 0.1" in line for line in shared)
    page = (folder / "selection_report.md").read_text()
    assert "| GRPO at half the group size (G 4 -> 2" in page and "quarter the group size" not in page  # G/4 = 1
