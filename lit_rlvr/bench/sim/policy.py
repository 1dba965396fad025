"""``SimPolicy``: the simulated model. A global skill, per-prompt difficulties and bonuses, seeded outcomes,
synthetic prompt embeddings (for LEEPS) and a noisy partial-rollout signal (for ARRoL)."""

from __future__ import annotations

import numpy as np

from lit_rlvr.bench.sim.config import MAX_ROLLOUTS_PER_PROMPT, SimConfig, logit, sigmoid
from lit_rlvr.bench.sim.learning import group_weights
from lit_rlvr.bench.sim.profile import DifficultyProfile
from lit_rlvr.selection_toolkit import seeded_uniform

__all__ = ["SimPolicy"]


class SimPolicy:
    """The simulated model: P(correct_i) = sigmoid(λ_i·skill + bonus_i − d_i), outcomes a pure function of
    (seed, step, prompt, k); λ_i = 1 unless ``SimConfig.profile`` gives the prompt's part another."""

    def __init__(self, cfg: SimConfig, seed: int) -> None:
        self.cfg = cfg
        self.seed = int(seed)
        rng = np.random.default_rng([int(cfg.dataset_seed), 0x51A])
        lo, hi = cfg.min_pass, 1 - cfg.min_pass
        self.learnability = np.ones(cfg.num_prompts)  # [N] λ: share of the global skill a prompt gains
        self.val_learnability = np.ones(cfg.num_val)  # [M]
        if cfg.profile:
            profile = DifficultyProfile.from_json(cfg.profile)
            if (profile.num_prompts, profile.num_val) != (cfg.num_prompts, cfg.num_val):
                raise ValueError(
                    f"SimConfig.profile {cfg.profile} has {profile.num_prompts} train and {profile.num_val} held-out "
                    f"prompts; set num_prompts={profile.num_prompts} and num_val={profile.num_val}"
                )
            initial, self.learnability, self.part = profile.train_arrays()
            val_initial, self.val_learnability, self.val_part = profile.val_arrays(rng)
            self.part_names = [p.name for p in profile.parts]
        else:
            initial = rng.beta(cfg.pass_alpha, cfg.pass_beta, cfg.num_prompts)
            val_initial = rng.beta(cfg.pass_alpha, cfg.pass_beta, cfg.num_val)
            self.part = np.zeros(cfg.num_prompts, dtype=np.int64)  # [N] part index (one part without a profile)
            self.val_part = np.zeros(cfg.num_val, dtype=np.int64)  # [M]
            self.part_names = ["all"]
        self.initial_pass = initial.clip(lo, hi)  # [N] p0
        self.difficulty = -logit(self.initial_pass)  # [N] d = −logit(p0)
        self.val_difficulty = -logit(val_initial.clip(lo, hi))  # [M]
        self.bonus = np.zeros(cfg.num_prompts)  # [N]
        self.skill = 0.0
        self.step = 0
        """The training step being simulated (set by ``simulate`` before each step)."""
        self._embeddings: np.ndarray | None = None

    # ------------------------------------------------------------------ outcomes

    def pass_rate(self, ids: np.ndarray) -> np.ndarray:
        """[n] P(correct) of train prompt ids now."""
        ids = np.asarray(ids, dtype=np.int64)
        return sigmoid(self.learnability[ids] * self.skill + self.bonus[ids] - self.difficulty[ids])

    @staticmethod
    def _keys(ids: np.ndarray, ks: np.ndarray) -> np.ndarray:
        """[n] int64 id · 4096 + k, the key of each (prompt, rollout index)."""
        ids = np.asarray(ids, dtype=np.int64)
        ks = np.asarray(ks, dtype=np.int64)
        if ks.size and int(ks.max()) >= MAX_ROLLOUTS_PER_PROMPT:
            raise ValueError(f"the simulator supports at most {MAX_ROLLOUTS_PER_PROMPT} rollouts per prompt per step")
        return ids * MAX_ROLLOUTS_PER_PROMPT + ks

    def outcomes(self, ids: np.ndarray, ks: np.ndarray, step: int) -> np.ndarray:
        """[n] bool: is the ks-th rollout of prompt ids at ``step`` correct (a pure function of seed, step, id, k)."""
        u = seeded_uniform(self.seed, step, self._keys(ids, ks), salt="sim-outcome")
        return u < self.pass_rate(ids)

    def peek(self, ids: np.ndarray, n: int, step: int) -> np.ndarray:
        """[len(ids), n] bool: outcomes of the first n rollouts of each prompt at ``step`` (the oracle's view)."""
        ids = np.asarray(ids, dtype=np.int64)
        rep = np.repeat(ids, n)
        ks = np.tile(np.arange(n), len(ids))
        return self.outcomes(rep, ks, step).reshape(len(ids), n)

    # ------------------------------------------------------------------ what selectors' networks would see

    def head_signal(self, ids: np.ndarray, ks: np.ndarray, step: int) -> np.ndarray:
        """[n] bool: ARRoL's partial-rollout signal, equal to the final outcome with probability
        ``cfg.head_accuracy``, independently per rollout (seeded: a pure function of seed, step, id, k)."""
        flip = seeded_uniform(self.seed, step, self._keys(ids, ks), salt="sim-head") >= self.cfg.head_accuracy
        return self.outcomes(ids, ks, step) ^ flip

    @staticmethod
    def head_features(signal: np.ndarray) -> np.ndarray:
        """[n, 2] float32 stand-in hidden states for ARRoL's quality head: (+1, −1) for a positive signal,
        (−1, +1) for a negative one (two dimensions, so the head's LayerNorm keeps the sign)."""
        x = np.where(np.asarray(signal, dtype=bool), 1.0, -1.0).astype(np.float32)  # [n]
        return np.stack([x, -x], axis=1)

    @property
    def embeddings(self) -> np.ndarray:
        """[N, D] float32 unit-norm synthetic prompt embeddings (LEEPS's encoder):
        e_i = (√ρ cos θ_i, √ρ sin θ_i, √(1−ρ) z_i), θ_i = π·p0_i, z_i a seeded unit vector in D − 2 dimensions,
        so cos(e_i, e_j) = ρ cos(π(p0_i − p0_j)) + (1 − ρ) cos(z_i, z_j), ρ = ``cfg.embed_difficulty``.
        From ``dataset_seed``: the same for every run seed."""
        if self._embeddings is None:
            cfg = self.cfg
            rng = np.random.default_rng([int(cfg.dataset_seed), 0xE3B])
            z = rng.standard_normal((cfg.num_prompts, cfg.embed_dim - 2))  # [N, D−2]
            z /= np.linalg.norm(z, axis=1, keepdims=True)
            theta = np.pi * self.initial_pass  # [N]
            rho = cfg.embed_difficulty
            e = np.concatenate([np.sqrt(rho) * np.stack([np.cos(theta), np.sin(theta)], axis=1), np.sqrt(1 - rho) * z], axis=1)
            self._embeddings = e.astype(np.float32)  # [N, D]
        return self._embeddings

    # ------------------------------------------------------------------ evaluation and learning

    def accuracy(self) -> float:
        """Exact expected pass rate on the held-out prompts."""
        return float(self._val_pass().mean())

    def _val_pass(self) -> np.ndarray:
        """[M] exact pass rates of the held-out prompts now."""
        return sigmoid(self.val_learnability * self.skill - self.val_difficulty)

    def part_accuracy(self) -> dict[str, float]:
        """{part: exact expected held-out pass rate} (a profile's parts; {} without a profile)."""
        if not self.cfg.profile:
            return {}
        rates = self._val_pass()
        return {name: float(rates[self.val_part == i].mean()) for i, name in enumerate(self.part_names) if (self.val_part == i).any()}

    def learn(self, ids: np.ndarray, n_in_gradient: np.ndarray, successes: np.ndarray, batch_size: int, group_size: int) -> float:
        """Apply one step's update from its in-gradient groups (prompt ids [K], rollouts n [K], successes [K]);
        returns the skill gained."""
        ids = np.asarray(ids, dtype=np.int64)
        w = group_weights(self.cfg.signal, n_in_gradient, successes, group_size)  # [K]
        gain = self.cfg.eta * float(w.sum()) / batch_size
        self.skill += gain
        if self.cfg.prompt_eta:
            np.add.at(self.bonus, ids, self.cfg.prompt_eta * w)
        return gain
