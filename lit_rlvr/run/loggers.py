"""CSVLogger whose metrics.csv is replaced atomically, never left truncated.

Lightning's CSV writer appends rows in place and, when a new column appears,
truncates ``metrics.csv`` and writes it again, so a full disk leaves it at 0 bytes.
Here every save writes the whole table (the rows already on disk plus the new
ones, under the union of the columns) to a temporary file in the same folder and
``os.replace``s it: a failed save leaves the previous file as it was, and the
unsaved rows stay in memory for the next try.
"""

from __future__ import annotations

import csv
import os

from lightning.fabric.utilities.cloud_io import _is_local_file_protocol
from lightning.pytorch.loggers import CSVLogger as _LightningCSVLogger
from lightning.pytorch.loggers.csv_logs import ExperimentWriter
from lightning.pytorch.utilities.rank_zero import rank_zero_only


class AtomicExperimentWriter(ExperimentWriter):
    """Lightning's CSV experiment writer with an atomic ``save``, keeping the rows of a resumed run."""

    def _check_log_dir_exists(self) -> None:
        """Lightning deletes an existing metrics.csv here; a resumed fit writes on into its run's folder
        (``lit_rlvr.run.runs``), so its earlier rows stay and ``save`` appends to them."""

    def save(self) -> None:
        if not self.metrics:
            return
        if not _is_local_file_protocol(self.metrics_file_path):  # remote storage: Lightning's own writer
            return super().save()
        rows = []
        if os.path.isfile(self.metrics_file_path):
            with open(self.metrics_file_path, newline="") as f:
                rows = list(csv.DictReader(f))
        keys = sorted(set(self.metrics_keys).union(*self.metrics, *rows))
        tmp = f"{self.metrics_file_path}.tmp-{os.getpid()}"
        try:
            with open(tmp, "w", newline="") as f:
                writer = csv.DictWriter(f, fieldnames=keys)
                writer.writeheader()
                writer.writerows(rows)
                writer.writerows(self.metrics)
                f.flush()
                os.fsync(f.fileno())
            os.replace(tmp, self.metrics_file_path)
        except BaseException:
            if os.path.exists(tmp):
                os.remove(tmp)
            raise
        self.metrics_keys = keys
        self.metrics = []


class CSVLogger(_LightningCSVLogger):
    """``lightning.pytorch.loggers.CSVLogger`` with atomic writes of metrics.csv (same arguments, same layout)."""

    @property
    def experiment(self) -> ExperimentWriter:
        if self._experiment is None and rank_zero_only.rank == 0:
            self._fs.makedirs(self.root_dir, exist_ok=True)
            self._experiment = AtomicExperimentWriter(log_dir=self.log_dir)
        return super().experiment

