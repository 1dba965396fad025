"""A measured difficulty profile for the simulator: per-part probed pass rates and learnability.

The default simulator draws every prompt's initial pass rate from one Beta and lets one global
skill lift every prompt alike, so zero variance is transient: every all-wrong prompt becomes
learnable. A real pool can hold parts that stay saturated (too hard for the model, or solved
from early on). A profile describes such a pool by parts, in training-id order:

- ``train_pass_rates``: the part's training prompts' initial pass rates, as probed on the real
  model (``lit-rlvr probe``; ``from_probes`` pools several probes per prompt with the
  Jeffreys estimate (k + 1/2) / (n + 1), so a prompt never seen solved gets a small positive rate
  instead of 0, which no skill could lift);
- ``val_prompts``: held-out prompts of the part, whose initial rates are drawn from the train
  rates with replacement (seeded by ``SimConfig.dataset_seed``);
- ``learnability`` λ: the prompt's logit is λ·skill + bonus − d, so λ = 0 is a part the model's
  general progress does not reach (large products for a 135M model), 1 the default dynamics.

λ and ``SimConfig.eta`` are not measured directly: ``benchmarks/sim_regime_b.py`` fits them to a
plain GRPO run's per-part training pass rates per epoch and writes the profile it used.
"""

from __future__ import annotations

import json
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Sequence

import numpy as np

__all__ = ["PartProfile", "DifficultyProfile", "jeffreys_rates"]


@dataclass(frozen=True)
class PartProfile:
    """One part of the training pool (its prompts are consecutive ids)."""

    name: str
    train_pass_rates: tuple[float, ...]
    val_prompts: int
    learnability: float = 1.0

    def __post_init__(self) -> None:
        if not self.train_pass_rates:
            raise ValueError(f"profile part {self.name!r}: train_pass_rates is empty")
        if any(not 0.0 <= p <= 1.0 for p in self.train_pass_rates):
            raise ValueError(f"profile part {self.name!r}: every train pass rate must be in [0, 1]")
        if self.val_prompts < 0:
            raise ValueError(f"profile part {self.name!r}: val_prompts must be >= 0, got {self.val_prompts}")
        if self.learnability < 0:
            raise ValueError(f"profile part {self.name!r}: learnability must be >= 0, got {self.learnability}")


@dataclass(frozen=True)
class DifficultyProfile:
    """The parts of a pool, in training-id order."""

    parts: tuple[PartProfile, ...]
    source: str = ""

    @property
    def num_prompts(self) -> int:
        return sum(len(p.train_pass_rates) for p in self.parts)

    @property
    def num_val(self) -> int:
        return sum(p.val_prompts for p in self.parts)

    def train_arrays(self) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """[N] initial pass rates, [N] learnability, [N] part index of the training prompts."""
        rates = np.concatenate([np.asarray(p.train_pass_rates, dtype=np.float64) for p in self.parts])
        lam = np.concatenate([np.full(len(p.train_pass_rates), p.learnability) for p in self.parts])
        part = np.concatenate([np.full(len(p.train_pass_rates), i) for i, p in enumerate(self.parts)])
        return rates, lam, part

    def val_arrays(self, rng: np.random.Generator) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """[M] initial pass rates (each part's train rates drawn with replacement), [M] learnability, [M] part index."""
        rates = [rng.choice(np.asarray(p.train_pass_rates), size=p.val_prompts, replace=True) for p in self.parts]
        lam = [np.full(p.val_prompts, p.learnability) for p in self.parts]
        part = [np.full(p.val_prompts, i) for i, p in enumerate(self.parts)]
        return np.concatenate(rates), np.concatenate(lam), np.concatenate(part)

    def with_learnability(self, values: dict[str, float]) -> "DifficultyProfile":
        """A copy with the named parts' learnability replaced."""
        unknown = set(values) - {p.name for p in self.parts}
        if unknown:
            raise ValueError(f"no profile part named {sorted(unknown)}; parts: {[p.name for p in self.parts]}")
        parts = tuple(
            PartProfile(p.name, p.train_pass_rates, p.val_prompts, float(values.get(p.name, p.learnability)))
            for p in self.parts
        )
        return DifficultyProfile(parts, self.source)

    def to_json(self, path: str | Path) -> None:
        Path(path).write_text(json.dumps({"source": self.source, "parts": [asdict(p) for p in self.parts]}, indent=1))

    @classmethod
    def from_json(cls, path: str | Path) -> "DifficultyProfile":
        try:
            data = json.loads(Path(path).read_text())
        except (OSError, ValueError) as err:
            raise ValueError(f"SimConfig.profile: cannot read difficulty profile {path}: {err}") from err
        try:
            parts = tuple(
                PartProfile(str(p["name"]), tuple(float(x) for x in p["train_pass_rates"]), int(p["val_prompts"]),
                            float(p.get("learnability", 1.0)))
                for p in data["parts"]
            )
        except (KeyError, TypeError) as err:
            raise ValueError(
                f"SimConfig.profile {path}: expected {{'parts': [{{'name', 'train_pass_rates', 'val_prompts', "
                f"'learnability'}}, ...]}}: {err!r}"
            ) from err
        return cls(parts, str(data.get("source", path)))

    @classmethod
    def from_probes(
        cls,
        probes: Sequence[dict],
        parts_of_prompt: Sequence[str],
        val_prompts: dict[str, int],
        learnability: dict[str, float] | None = None,
        source: str = "",
    ) -> "DifficultyProfile":
        """Pool ``lit-rlvr probe`` results (``rates``: one entry per training prompt, id order)
        into per-prompt Jeffreys rates, grouped by ``parts_of_prompt`` (consecutive ids per part)."""
        n_prompts = len(parts_of_prompt)
        correct = np.zeros(n_prompts)
        samples = 0
        for probe in probes:
            rates = probe["rates"]
            if len(rates) != n_prompts:
                raise ValueError(f"probe with {len(rates)} prompts; the pool has {n_prompts} (probe with --n 0)")
            g = int(probe["g"])
            correct += np.array([round(float(r["rate"]) * g) for r in rates])
            samples += g
        rates = jeffreys_rates(correct, samples)
        names = list(dict.fromkeys(parts_of_prompt))
        learnability = learnability or {}
        parts = []
        for name in names:
            ids = [i for i, part in enumerate(parts_of_prompt) if part == name]
            if ids != list(range(ids[0], ids[-1] + 1)):
                raise ValueError(f"part {name!r}: its prompts are not consecutive ids")
            parts.append(PartProfile(name, tuple(float(rates[i]) for i in ids), int(val_prompts.get(name, 0)),
                                     float(learnability.get(name, 1.0))))
        return cls(tuple(parts), source)


def jeffreys_rates(correct: np.ndarray, samples: int) -> np.ndarray:
    """(k + 1/2) / (n + 1): the Jeffreys-prior posterior mean of a pass rate seen k times in n."""
    return (np.asarray(correct, dtype=np.float64) + 0.5) / (samples + 1.0)
