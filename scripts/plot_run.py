"""Plot one run's training reward curve and held-out accuracy to a PNG.

    python scripts/plot_run.py runs/quickstart                  # the latest run: runs/quickstart/csv/version_N/reward.png
    python scripts/plot_run.py runs/quickstart --version 0      # that run
    python scripts/plot_run.py runs/quickstart --all --out runs/quickstart/all.png   # every run, side by side

Reads ``<run>/csv/version_*/metrics.csv`` (the CSVLogger output of ``lit-rlvr fit``; each fit is
its own version, a resumed fit writes on into its run's version). One version is plotted unless
``--all`` asks for every one. The PNG goes beside that metrics.csv unless ``--out`` says where
(``--all``: beside the run folder's versions). ``lit-rlvr fit`` writes the same plot as ``reward.png``
beside metrics.csv at the end of fit.
"""

from __future__ import annotations

import argparse

from lit_rlvr.plot import metrics_files, plot_run, plot_runs, read_run, run_file


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("run", help="a run folder (runs/quickstart) or its CSVLogger folder (runs/quickstart/csv)")
    parser.add_argument("--version", type=int, default=None, help="plot version_N (default: the latest)")
    parser.add_argument("--all", action="store_true", help="plot every version, one color each")
    parser.add_argument("--out", default=None, help="the PNG (default: reward.png beside the plotted metrics.csv)")
    parser.add_argument("--smooth", type=int, default=5, help="moving-average window over steps")
    args = parser.parse_args()
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


if __name__ == "__main__":
    main()
