"""``lit-rlvr report``: the selection report's page (``selection_report.md``) and figure (``selection_report.png``)
in a run's version folder, from the statistics and lines of ``lit_rlvr.report.selection_report``."""

from __future__ import annotations

import argparse
from pathlib import Path
from typing import Optional

from lit_rlvr.report.group_file import FILE_NAME, read_facts, read_groups
from lit_rlvr.report.plot import Row, read_run, run_file, which_run
from lit_rlvr.report.report_figure import plot_report
from lit_rlvr.report.selection_report import (advice_block, history_judgement, oracle_ratio, probability_text,
                                              run_and_oracle, selection_stats)

__all__ = ["REPORT_MD", "REPORT_PNG", "main", "write_report"]

REPORT_MD, REPORT_PNG = "selection_report.md", "selection_report.png"


def _pct(x: float) -> str:
    return f"{100 * x:.1f}%"


def write_report(run: str | Path, version: Optional[int] = None) -> tuple[Path, Path]:
    """Write ``selection_report.md`` and ``.png`` into the run's version folder; returns their paths."""
    folder = Path(run)
    metrics = folder / "metrics.csv" if (folder / "metrics.csv").is_file() else run_file(run, version)
    folder = metrics.parent
    groups = folder / FILE_NAME
    if not groups.is_file():
        raise FileNotFoundError(f"no {FILE_NAME} in {folder}: runs of lit-rlvr fit keep it there (GroupRecorder)")
    from lit_rlvr.critical_batch.levers import group_sizes, run_noise
    from lit_rlvr.report.lever_report import lever_page_section

    rows = read_run(metrics)
    records = read_groups(groups)
    s, oracle = selection_stats(records), oracle_ratio(rows)
    s.num_train = read_facts(folder).num_train
    png = plot_report(s.epochs, _curves(rows), folder / REPORT_PNG)
    lines = [
        f"# Selection report: {folder}", "", "## Advice (the same lines as the end-of-fit summary)", "", "```",
        *(line.strip() for line in advice_block(rows, groups)), "```", "",
        "The advice names the lever predicted to need the fewest rollouts among those whose whole 95% interval is "
        "below 1.0, with the setting that runs it; \"keep this setting\" when every interval is above 1.0; "
        "\"undecided\" otherwise. Bounds are context. The interval leaves out the critical-batch model's own error: "
        "on this project's benchmarks a smaller prompt batch paid more than the model predicted and pre-selection "
        "did not pay where it predicted a saving (docs/benchmarks/critical_batch.md, \"The critical-batch model against the grids\").", "",
        "## Where the rollouts went", "",
        f"{s.rollouts} rollouts in {s.groups} groups over {len(s.epochs)} epoch(s). "
        "Shares are of each epoch's rollouts.", "",
        "| epoch | rollouts | groups | zero-variance, all right | zero-variance, all wrong | "
        "on prompts zero-variance at their previous visit |",
        "|---|---:|---:|---:|---:|---:|",
    ]
    for e in s.epochs:
        lines.append(f"| {'?' if e.epoch is None else e.epoch} | {e.rollouts} | {e.groups} | {_pct(e.all_right)} | "
                     f"{_pct(e.all_wrong)} | {_pct(e.after_zero_variance)} |")
    lines += [
        f"| all | {s.rollouts} | {s.groups} | {_pct(s.all_right)} | {_pct(s.all_wrong)} | {_pct(s.after_zero_variance)} |",
        "", "## Persistence of zero variance", "",
        f"Over the {s.revisits} groups whose prompt had a previous visit: {s.zero_variance_now} are zero-variance now, "
        f"{s.zero_variance_before} were at the previous visit, {s.both} both.", "",
        f"- P(zero-variance at the previous visit | zero-variance now) = {probability_text(s.p_before_given_now)}: the share of "
        "this visit's zero-variance groups a history-based selector could have seen coming.",
        f"- P(zero-variance now | zero-variance at the previous visit) = {probability_text(s.p_now_given_before)}: how often "
        "skipping such a prompt would have been right.", "",
        "## Hindsight oracle", "",
        f"{oracle.describe()}: {oracle.counts()}. (The end-of-fit summary's rollouts \"in the gradient\" are fewer "
        "than the effective ones: of those, the rollouts whose advantage is not zero.)" if oracle
        else "n/a: the metrics have no cumulative rollout counts.", "",
        "The oracle is this run's held-out curve placed at its cumulative effective rollouts (rollouts in groups "
        "with reward variance): an oracle that never generated zero-variance groups makes the same updates, since "
        "those groups have zero advantage, up to the loss normaliser (their rows count in a token-mean's "
        "denominator) and the KL term.", "",
        *lever_page_section(run_noise(rows), history_judgement(s)[0], group_sizes(records)),
        f"![shares per epoch and accuracy against rollouts]({REPORT_PNG})", "",
    ]
    md = folder / REPORT_MD
    md.write_text("\n".join(lines), encoding="utf-8")
    return md, png


def _curves(rows: list[Row]):
    from lit_rlvr.report.curves import accuracy_curve

    found = run_and_oracle(rows)
    if found is None or not any(k.startswith("val/") for r in rows for k in r):
        return None
    run, oracle, metric = found
    x, y, _ = accuracy_curve(run, metric)
    ox, oy, _ = accuracy_curve(oracle, metric)
    return (x, y), (ox, oy), metric


def main(argv: Optional[list[str]] = None) -> None:
    parser = argparse.ArgumentParser(
        prog="lit-rlvr report", allow_abbrev=False,
        description="Write selection_report.md and selection_report.png into a run's version folder: where its "
        "rollouts went, whether zero variance persisted across visits, the critical batch and what each lever "
        "(a smaller batch, refill, pre-selection) is predicted to save.",
    )
    parser.add_argument("run", help="a run folder (runs/tiny), its CSVLogger folder or a version_N folder")
    parser.add_argument("--version", type=int, default=None, help="report version_N (default: the latest)")
    args = parser.parse_args(argv)
    try:
        print(f"lit-rlvr report: {which_run(args.run, args.version, tool='report')}")
        md, png = write_report(args.run, args.version)
    except (FileNotFoundError, ValueError) as e:
        raise SystemExit(f"lit-rlvr report: {e}") from None
    print(f"wrote {md}\nwrote {png}")
    print("\n".join(advice_block(read_run(md.parent / "metrics.csv"), md.parent / FILE_NAME)))
