"""The update's side of the noise-scale estimate: hooks on for one update, group ids per forward, one record per step.

``NoiseMeter`` is what ``Updater.run`` calls; the estimator itself (per-group gradients,
the unbiased moments, the smoothing) is ``lit_rlvr.critical_batch.noise_scale``. Counts of groups are
summed over ranks (DDP); FSDP2 and gradient checkpointing are not measured (their forwards run
twice or on shards: a warning says so once and the metrics stay empty).
"""

from __future__ import annotations

import logging
from typing import Any, Callable, Optional

import torch

from lit_rlvr.collate import TrainingTensors
from lit_rlvr.losses import Normalizer
from lit_rlvr.settings import NoiseScaleSettings
from lit_rlvr.sharding import is_sharded
from lit_rlvr.critical_batch.group_gradients import SPLIT_PARTS, GroupGradients
from lit_rlvr.critical_batch.noise_scale import NoiseScaleTracker, adam_denominators
from lit_rlvr.update.plan import carries_gradient
from lit_rlvr.update.prefix import prompt_groups

log = logging.getLogger(__name__)

NO_GROUP = -1
"""The unit id of a placeholder row (``Updater.empty_row``): its gradient is zero and is not recorded."""


class NoiseMeter:
    """Measures the gradient noise scale of every optimizer step of the update it is given.

    Args:
        settings: ``NoiseScaleSettings`` (on/off, the moving averages' β).
    """

    def __init__(self, settings: NoiseScaleSettings) -> None:
        self.settings = settings
        self.tracker = NoiseScaleTracker(settings.ema)
        self.recorder = GroupGradients()
        self._units: tuple[int, int] = (0, 0)
        self._warned = False
        self.listeners: list[Callable[[GroupGradients, Normalizer, float], None]] = []
        """Called with (the recorder, the step's normaliser, the loss's multiplier) once an optimizer step's backward
        passes are done, before the step moves the weights (``GroupValueProbe`` reads each group's gradient there)."""

    def unsupported(self, policy: torch.nn.Module) -> Optional[str]:
        """Why this policy's update cannot be measured (None: it can)."""
        if is_sharded(policy):
            return "FSDP2 shards the weights the per-group gradients are read from"
        if any(getattr(m, "gradient_checkpointing", False) is True for m in policy.modules()):
            return "gradient checkpointing runs each forward twice"
        if not GroupGradients.modules_of(policy):
            return "no trainable nn.Linear weights"
        return None

    def begin(self, policy: torch.nn.Module, tensors: TrainingTensors, reduce: Optional[Callable[[torch.Tensor], torch.Tensor]]) -> bool:
        """Attach the hooks for this update; False (nothing attached) when off or unsupported."""
        if not self.settings.enabled:
            return False
        why = self.unsupported(policy)
        if why is not None:
            if not self._warned:
                log.warning("lit-rlvr: the gradient noise scale is not measured: %s (model.noise_scale.enabled=false "
                            "silences this)", why)
                self._warned = True
            return False
        units = tensors.units if tensors.units is not None else torch.zeros(0, dtype=torch.long)
        informative = units[carries_gradient(tensors).to(units.device)] if len(tensors) else units
        counts = torch.tensor([float(len(torch.unique(units))), float(len(torch.unique(informative)))], dtype=torch.float64)
        if reduce is not None:
            counts = reduce(counts.to(tensors.input_ids.device)).cpu()
        self._units = (int(counts[0]), int(counts[1]))
        self.recorder.attach(policy)
        return True

    def before_forwards(self, mb: TrainingTensors, share_prompt_prefix: bool) -> None:
        """The group id of each row of the forward(s) about to run on ``mb`` (the shared-prefix path runs two).

        With the within-group split, the id of a part of a group instead (``SPLIT_PARTS`` · group + part): its
        even rows, its odd rows, and the shared prompt forward, which is one sum over the group's rows."""
        units = mb.units if mb.units is not None else torch.full((len(mb),), NO_GROUP, dtype=torch.long)
        prompt_units = units
        if self.settings.split_groups:
            halves = mb.halves if mb.halves is not None else torch.zeros_like(units)
            placeholder = units < 0
            units = torch.where(placeholder, units, SPLIT_PARTS * units + halves.to(units.device))
            prompt_units = torch.where(placeholder, prompt_units, SPLIT_PARTS * prompt_units + 2)
        if share_prompt_prefix:
            first, _ = prompt_groups(mb)  # the prompt forward's rows are the first row of each distinct prompt
            self.recorder.expect([prompt_units[first.to(units.device)], units])
        else:
            self.recorder.expect([units])

    def begin_step(self) -> None:
        self.recorder.reset()

    def gradients_ready(self, normalizer: Normalizer, loss_scale: float) -> None:
        """The step's groups' gradients are recorded and the weights not yet stepped: tell the listeners."""
        for listener in self.listeners:
            listener(self.recorder, normalizer, loss_scale)

    def record_step(self, optimizer: Any, loss_scale: float, reduce: Optional[Callable[[torch.Tensor], torch.Tensor]]) -> None:
        """After the optimizer step: this step's moments (Adam's v̂ as just used) into the tracker."""
        moments = self.recorder.moments(
            self._units[0], self._units[1], scale=loss_scale,
            adam_denominators=adam_denominators(optimizer, self.recorder.params), reduce=reduce,
            split=self.settings.split_groups,
        )
        self.tracker.update(moments)

    def end(self) -> dict[str, float]:
        """Detach the hooks; the smoothed metrics (``noise/...``) to log."""
        self.recorder.detach()
        return self.tracker.metrics()
