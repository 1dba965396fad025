"""Plot one run's training reward curve and held-out accuracy to a PNG.

    python scripts/plot_run.py runs/quickstart --out docs/img/quickstart.png

Reads ``<run>/csv/version_*/metrics.csv`` (the CSVLogger output of ``lit-rlvr fit``). A run
resumed into new versions is plotted whole, in step order (``lit_rlvr.plot.load_run``).
``lit-rlvr fit`` also writes this plot as ``reward.png`` beside metrics.csv at the end of fit.
"""

from __future__ import annotations

import argparse

from lit_rlvr.plot import load_run, plot_run


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("run")
    parser.add_argument("--out", default="reward.png")
    parser.add_argument("--smooth", type=int, default=5, help="moving-average window over steps")
    args = parser.parse_args()
    try:
        rows = load_run(args.run)
    except (FileNotFoundError, ValueError) as e:
        raise SystemExit(str(e)) from None
    print(f"wrote {plot_run(rows, args.out, smooth=args.smooth)}")


if __name__ == "__main__":
    main()
