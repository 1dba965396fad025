"""Callbacks for stop tests, named on the command line (``--trainer.callbacks+=tests.stop_helpers....``)."""

import os

from lit_rlvr.selection import SelectionCallback


class SignalAfterRollout(SelectionCallback):
    """Sends this process ``signum`` once step ``step``'s rollouts are scored (stage 4: after the abandonable part)."""

    def __init__(self, step: int = 0, signum: int = 15) -> None:
        self.step, self.signum = step, signum

    def on_rollouts_scored(self, trainer, pl_module, batch) -> None:
        if int(pl_module.steps_done) == self.step:
            os.kill(os.getpid(), self.signum)
