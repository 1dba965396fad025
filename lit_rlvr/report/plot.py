"""A run's metrics and its reward/accuracy plot.

Each fit is one run: one ``csv/version_N/metrics.csv`` (``lit_rlvr.run.runs``). A fit resumed with
``--ckpt_path`` writes on into the same file, so a step logged before the stop and again after
the resume appears twice: ``read_run`` keeps the resumed rows of such steps, in step order.
``load_run`` reads one version of a run folder (the latest unless told), never several mixed;
``plot_runs`` draws several runs side by side when asked. ``lit-rlvr plot`` (``main``) and the
end-of-fit summary (``lit_rlvr.report.summary``) share this.
"""

from __future__ import annotations

import argparse
import csv
import re
from pathlib import Path
from typing import Iterable, Optional, Union

Row = dict[str, float]
PathLike = Union[str, Path]

_VERSION = re.compile(r"^version_(\d+)$")


def version_number(path: PathLike) -> int:
    """N of the ``version_N`` folder holding ``path`` (a metrics.csv), or of ``path`` itself."""
    for part in reversed(Path(path).parts):
        m = _VERSION.match(part)
        if m:
            return int(m.group(1))
    raise ValueError(f"{path} is not inside a version_N folder")


def metrics_files(run: PathLike) -> list[Path]:
    """``version_*/metrics.csv`` of one run, in version-number order.

    ``run`` is the folder holding ``version_*`` (a CSVLogger's ``save_dir/name``) or a run
    directory with one such folder below it (``runs/tiny`` for ``runs/tiny/csv``).
    """
    root = Path(run)
    paths = [p for p in root.glob("version_*/metrics.csv") if _VERSION.match(p.parent.name)]
    if not paths:
        paths = [p for p in root.rglob("version_*/metrics.csv") if _VERSION.match(p.parent.name)]
        folders = sorted({str(p.parent.parent) for p in paths})
        if len(folders) > 1:
            raise ValueError(f"{run} holds several runs ({', '.join(folders)}): name one of them")
    if not paths:
        raise FileNotFoundError(f"no version_*/metrics.csv under {run}")
    return sorted(paths, key=version_number)


def read_metrics(path: PathLike) -> list[Row]:
    """One metrics.csv as rows of floats, blank cells left out, in file order."""
    with open(path, newline="") as f:
        return [{k: float(v) for k, v in r.items() if k and v not in ("", None)} for r in csv.DictReader(f)]


def merge_versions(versions: Iterable[list[Row]]) -> list[Row]:
    """Consecutive stretches of one run as one: a later stretch's rows replace earlier rows of the same
    steps; step order, file order within a step."""
    merged: list[Row] = []
    for rows in versions:
        steps = {r["step"] for r in rows if "step" in r}
        merged = [r for r in merged if r.get("step") not in steps] + [r for r in rows if "step" in r]
    return sorted(merged, key=lambda r: r["step"])  # stable: file order kept within a step


def read_run(path: PathLike) -> list[Row]:
    """One run's metrics.csv: where the step count goes back (a resume from an earlier checkpoint),
    the rows after it replace those of the steps it repeats."""
    stretches: list[list[Row]] = [[]]
    for r in read_metrics(path):
        if "step" in r and stretches[-1] and r["step"] < max(x.get("step", 0) for x in stretches[-1]):
            stretches.append([])
        stretches[-1].append(r)
    return merge_versions(stretches)


def load_run(run: PathLike, version: Optional[int] = None) -> list[Row]:
    """The rows of one run under ``run``: ``version_<version>``, or the latest version."""
    return read_run(run_file(run, version))


def run_file(run: PathLike, version: Optional[int] = None) -> Path:
    """The metrics.csv of ``version`` (default: the latest) under ``run``."""
    paths = metrics_files(run)
    if version is None:
        return paths[-1]
    found = [p for p in paths if version_number(p) == version]
    if not found:
        raise FileNotFoundError(f"no version_{version} under {run} (it has {', '.join(p.parent.name for p in paths)})")
    return found[0]


def which_run(run: PathLike, version: Optional[int] = None, *, tool: str) -> str:
    """One line: the version folder ``lit-rlvr <tool>`` reads for ``run`` (``run_file``) and how to pick another."""
    from lit_rlvr.run.paths import show_path

    folder = Path(run)
    if (folder / "metrics.csv").is_file():
        return f"read {show_path(folder)} (a version folder, named on the command line)"
    chosen = run_file(run, version).parent
    versions = [p.parent.name for p in metrics_files(run)]
    how = "named by --version" if version is not None else f"the newest of {len(versions)}: {', '.join(versions)}"
    other = f"; another: lit-rlvr {tool} {run} --version N" if len(versions) > 1 else ""
    return f"read {show_path(chosen)} ({how}{other})"


def heldout(rows: list[Row]) -> list[tuple[int, Row, bool]]:
    """Held-out evaluations as ``(steps done, {val/...: value}, before training)``.

    The evaluation before training is one logged ahead of the first training row (a row with
    any metric besides ``val/*``, ``step`` and ``epoch``); any other is logged at the index of
    the last step run, so it is ``step + 1`` steps in.
    """
    out, trained = [], False
    for r in rows:
        val = {k: v for k, v in r.items() if k.startswith("val/")}
        trained = trained or len(r) > len(val) + ("step" in r) + ("epoch" in r)
        if val:
            out.append((0 if not trained else int(r["step"]) + 1, val, not trained))
    return out


def plot_run(rows: list[Row], out: PathLike, smooth: int = 5, title: Optional[str] = None) -> Path:
    """Training accuracy (per step and its moving average) and held-out accuracy over steps, as a PNG."""
    return plot_runs({"": rows}, out, smooth=smooth, title=title)


def plot_runs(runs: dict[str, list[Row]], out: PathLike, smooth: int = 5, title: Optional[str] = None) -> Path:
    """``plot_run`` for several runs in one figure, one color each, labelled by the keys of ``runs``."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(7, 4))
    w = max(1, smooth)
    palette = ["tab:blue", "tab:red", "tab:purple", "tab:brown", "tab:olive", "tab:cyan"]
    for n, (label, rows) in enumerate(runs.items()):
        name = f"{label}: " if label else ""
        train = [r for r in rows if "reward/mean" in r]
        steps = [int(r["step"]) + 1 for r in train]
        reward = [r.get("reward/accuracy", r["reward/mean"]) for r in train]
        moving = [sum(reward[max(0, i - w + 1) : i + 1]) / len(reward[max(0, i - w + 1) : i + 1]) for i in range(len(reward))]
        color = palette[n % len(palette)]
        ax.plot(steps, reward, color=color, alpha=0.3, label=f"{name}training accuracy (sampled rollouts)")
        ax.plot(steps, moving, color=color, label=f"{name}same, {w}-step moving average")
        evals = heldout(rows)
        keys = sorted({k for _, val, _ in evals for k in val}, key=lambda k: (k != "val/pass@1", k))
        markers = ["o", "s", "^", "D"] if len(runs) > 1 else ["o"] * 4
        colors = [color] * 4 if len(runs) > 1 else ["tab:green", "tab:orange", "tab:red", "tab:purple"]
        for key, marker, c in zip(keys, markers, colors):
            points = [(s, val[key]) for s, val, _ in evals if key in val]
            ax.plot([s for s, _ in points], [v for _, v in points], marker, linestyle="", markersize=8, color=c,
                    label=f"{name}held-out {key[4:]}")
    ax.set_xlabel("training steps done")
    ax.set_ylabel("accuracy")
    ax.set_ylim(0, 1)
    ax.grid(alpha=0.3)
    ax.legend(loc="lower right", fontsize=8)
    if title:
        ax.set_title(title, fontsize=9)
    fig.tight_layout()
    out = Path(out)
    out.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(out, dpi=120)
    plt.close(fig)
    return out


PLOT_USAGE = """Plot one run's training reward curve and held-out accuracy to a PNG.

    lit-rlvr plot runs/quickstart                  # the latest run: runs/quickstart/csv/version_N/reward.png
    lit-rlvr plot runs/quickstart --version 0      # that run
    lit-rlvr plot runs/quickstart --all --out runs/quickstart/all.png   # every run, side by side

Reads <run>/csv/version_*/metrics.csv (the CSVLogger output of lit-rlvr fit; each fit is its own
version, a resumed fit writes on into its run's version). One version is plotted unless --all asks
for every one. The PNG goes beside that metrics.csv unless --out says where (--all: beside the run
folder's versions). lit-rlvr fit writes the same plot as reward.png beside metrics.csv at the end of fit.
"""


def main(argv: Optional[list[str]] = None) -> Path:
    """``lit-rlvr plot``: draw a run (or all its versions) and say where the PNG went."""
    parser = argparse.ArgumentParser(prog="lit-rlvr plot", description=PLOT_USAGE, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("run", help="a run folder (runs/quickstart) or its CSVLogger folder (runs/quickstart/csv)")
    parser.add_argument("--version", type=int, default=None, help="plot version_N (default: the latest)")
    parser.add_argument("--all", action="store_true", help="plot every version, one color each")
    parser.add_argument("--out", default=None, help="the PNG (default: reward.png beside the plotted metrics.csv)")
    parser.add_argument("--smooth", type=int, default=5, help="moving-average window over steps")
    args = parser.parse_args(argv)
    try:
        if args.all:
            paths = metrics_files(args.run)
            out = args.out or paths[-1].parent.parent / "reward_all_versions.png"
            written = plot_runs({p.parent.name: read_run(p) for p in paths}, out, smooth=args.smooth, title=str(args.run))
        else:
            path = run_file(args.run, args.version)
            out = args.out or path.parent / "reward.png"
            written = plot_run(read_run(path), out, smooth=args.smooth, title=str(path.parent))
    except (FileNotFoundError, ValueError) as e:
        raise SystemExit(str(e)) from None
    print(f"wrote {written}")
    return written
