"""The run wing: the command line and everything around a run (its config checks, console, progress log,
checkpoints and step files, loggers, preemption, resumes, thread settings, paths).

This package file imports nothing: each module is imported by its own name."""
