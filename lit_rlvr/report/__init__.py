"""The report wing: what a run tells its user after the fit (the summary, `lit-rlvr report`, the plot, the
advice) and the per-group records they read.

This package file imports nothing: each module is imported by its own name."""
