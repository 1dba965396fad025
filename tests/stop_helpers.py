"""Callbacks for stop tests, named on the command line (``--trainer.callbacks+=tests.stop_helpers....``)."""

import os
import signal

from lightning.pytorch import Callback

from lit_rlvr.selection import SelectionCallback


class SignalAfterRollout(SelectionCallback):
    """Sends this process ``signum`` once step ``step``'s rollouts are scored (stage 4: after the abandonable part)."""

    def __init__(self, step: int = 0, signum: int = 15) -> None:
        self.step, self.signum = step, signum

    def on_rollouts_scored(self, trainer, pl_module, batch) -> None:
        if int(pl_module.steps_done) == self.step:
            os.kill(os.getpid(), self.signum)


class KillAtSave(Callback):
    """SIGKILLs this process as the ``save``-th checkpoint of optimizer step ``step`` is being made: with
    ModelCheckpoint's ``save_last``, the second is ``last.ckpt``, begun after the step's own file is on disk and
    before Lightning logs the step's metrics row (a kill between a step's checkpoint and its row)."""

    def __init__(self, step: int = 2, save: int = 2) -> None:
        self.step, self.save, self.seen = step, save, 0

    def on_save_checkpoint(self, trainer, pl_module, checkpoint) -> None:
        if trainer.global_step == self.step:
            self.seen += 1
            if self.seen == self.save:
                os.kill(os.getpid(), signal.SIGKILL)
