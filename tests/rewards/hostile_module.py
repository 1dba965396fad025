"""A reward module whose top-level code leaves a mark: it must run in a worker, never in the trainer."""

import os
import tempfile

with open(os.path.join(tempfile.gettempdir(), f"lit-rlvr-import-marker-{os.getpid()}"), "w") as _f:
    _f.write("imported")


def reward(completion, answer, metadata):
    return 1.0
