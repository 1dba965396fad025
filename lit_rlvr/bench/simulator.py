"""A simulated policy driven through the REAL training step, to compare selection strategies.

What is real and what is simulated
----------------------------------
Real: every selector callback (built from ``configs/methods/*.yaml`` by class path and
init args), ``PromptDataModule`` (seeded epoch permutations, ``pool_multiple × B``
candidates per step, ``draw`` for refills), ``RolloutLoop`` (rounds planned by the real
allocator, one engine call per round, each round scored by a ``RewardScorer``), and
``GRPOModule.training_step`` itself: ``SimModule`` subclasses ``GRPOModule`` and replaces
only the parts that touch a neural network (``_update``: the optimizer step) and Lightning's
logger (``log_dict``/``lr_schedulers``). So the observe hook, the filters ANDed in list
order, ``grpo_advantages`` and the ``accounting`` counters are the trainer's own code.

Simulated: the policy. ``SimEngine`` (the ``RolloutEngine`` protocol) returns completions
whose text encodes the prompt id and k, the index of the rollout of that prompt this step
(``str(id · 4096 + k)``); the reward ``SimReward`` scores it 1 or 0 by drawing from the
simulated success probability of that prompt.

Dynamics (every constant is a ``SimConfig`` field)
--------------------------------------------------
* **Difficulty.** Prompt i's initial pass rate p0_i ~ Beta(pass_alpha, pass_beta)
  (default Beta(0.3, 0.4): U-shaped, mean 0.43, about 27% of prompts below 0.05 and 15%
  above 0.95, as in real RLVR sets where many prompts are never or always solved), clipped
  to [min_pass, 1 − min_pass]; its latent difficulty is d_i = −logit(p0_i).
* **Success.** P(correct_i) = sigmoid(skill + bonus_i − d_i), skill starting at 0. The
  k-th rollout of prompt i at step t is correct iff u(seed, t, i, k) < P(correct_i), with u a
  seeded uniform (``greso.seeded_uniform``, splitmix64): outcomes are a pure function of
  (seed, step, prompt, k), which is what lets the oracle peek at them before rollout.
* **Learning.** After each step, from the rollouts that entered the gradient (kept, with a
  non-zero advantage), grouped by prompt: each such group g has weight w_g and
  skill ← skill + eta · Σ_g w_g / B. ``signal="groups"`` (default): w_g = 1, i.e. progress
  is proportional to the number of prompts that carried gradient; ``"rollouts"``: w_g =
  n_g / G (per in-gradient rollout); ``"capped"``: w_g = min(n_g, G) / G. A step that
  trains on B effective groups gains exactly eta.
* **Per-prompt learning** (``prompt_eta``): each prompt with a group in the gradient also
  gets bonus_i ← bonus_i + prompt_eta · w_g, so prompts trained on become easier for
  themselves (memorisation); the bonus does not transfer to held-out prompts.
* **Accuracy** (``val/pass@1``): the exact expected pass rate on ``num_val`` held-out
  prompts drawn from the same difficulty distribution: mean_j sigmoid(skill − d_j).
  No sampling noise; it depends on skill only.
* **Scale and seeds.** Defaults: 10,000 train prompts, B = 128, G = 8 (a method config's
  ``num_generations`` wins), each run stops at ``max_rollouts`` = 500,000 generated
  rollouts or ``steps`` = 700, so every strategy gets the same rollout budget. The
  difficulties come from ``dataset_seed`` (fixed); the run seed drives the data order
  (``PromptDataModule(seed=...)``), the outcomes and the selectors' draws (``module.seed``).

Left out on purpose (read results with it): learning is linear in the gradient's size (no
diminishing returns from a larger effective batch); zero-variance rollouts left in a batch
cost only their generation (the real token-mean loss would dilute the step); PODS's saving
(a cheaper update) and wall-clock generation cost are not modelled.

The oracle
----------
``Oracle`` is a ``RolloutAllocator`` that peeks at the outcomes the simulator will produce
(the same seeded uniforms) and rolls out only prompts whose G rollouts will be mixed: the
first B such prompts of the pool, topped up with fresh ``draw``s when the pool holds fewer.
Each step trains on B groups that are all effective, spending exactly B·G rollouts:
effective-rollout ratio 1.0: with ``signal="groups"`` no step gains more than eta (no
strategy trains on more than B groups), so the oracle's B·G rollouts per eta of skill is the
limit for every strategy that rolls out groups of G (VIGOR and SARA vary group sizes but
spend up to B·G per step for at most B groups, so it bounds them too). With
``signal="rollouts"`` it is a bound outright: no strategy has more in-gradient rollouts than
it generates. When fewer than B prompts of the whole data set would be mixed (late, at
accuracy above ~0.93 with the defaults) it rolls out fewer.

Stand-ins
---------
``SimTrainer`` provides what the module and the selectors read from a ``Trainer``
(``callbacks``, ``datamodule``, ``world_size = 1``, ``global_rank``, ``log_dir``);
``simulate`` calls every callback's ``on_train_batch_start`` in list order before
``training_step``, as Lightning does, and ``module.on_fit_start()`` once (the module's own
composition checks and every selector's ``setup_selection``).

Timing
------
``time/selection_ms`` is wall time inside the selector hooks only (``on_train_batch_start``,
``plan``, ``on_rollouts_scored``, ``select_rollouts``, ``token_weights``), minus time spent
in ``PromptDataModule.draw`` called from within them (data, not selection). The fake
engine, the reward and the accounting are excluded.
"""

from __future__ import annotations

import csv
import importlib
import math
import time
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any, Optional, Sequence

import numpy as np
import torch
import yaml

from lit_rlvr.bench.timing import Stopwatch, instrument
from lit_rlvr.callbacks.base import RolloutAllocator, RolloutState, SelectionCallback
from lit_rlvr.callbacks.greso import seeded_uniform
from lit_rlvr.data.datamodule import PromptDataModule
from lit_rlvr.data.sources import PromptSource
from lit_rlvr.module import GRPOModule, RolloutSettings
from lit_rlvr.rewards.base import RewardFunction
from lit_rlvr.rollout.base import GenerationRequest, SamplingConfig
from lit_rlvr.types import Completion, RolloutBatch

__all__ = [
    "DEFAULT_STRATEGIES",
    "Oracle",
    "SimConfig",
    "SimEngine",
    "SimModule",
    "SimPolicy",
    "SimReward",
    "SimResult",
    "StrategySpec",
    "simulate",
    "strategy_spec",
]

DEFAULT_STRATEGIES = (
    "grpo",
    "dynamic_sampling",
    "greso",
    "pods",
    "greso_pods",
    "vigor",
    "sara",
    "mopps",
    "dps",
    "sara_dps",
    "oracle",
)
"""Strategies run by default: every name but ``oracle`` is ``configs/methods/<name>.yaml``."""

METHODS_DIR = Path(__file__).resolve().parents[2] / "configs" / "methods"
"""Where method configs live in a source checkout."""

_MAX_ROLLOUTS_PER_PROMPT = 4096  # k < 4096: (prompt id, k) packs into one int64 (completion text, seeded uniform)
_TOKENS = [0, 0]  # every simulated completion is 2 tokens long
_LOGPROBS = [0.0, 0.0]


@dataclass
class SimConfig:
    """Simulation settings (dynamics and scale); every field is documented in docs/benchmarks.md."""

    num_prompts: int = 10_000
    """Train prompts (ids 0..N−1), served by a real PromptDataModule."""
    num_val: int = 1_000
    """Held-out prompts for the exact accuracy."""
    batch_size: int = 128
    """B: prompt groups a step trains on."""
    group_size: int = 8
    """G: rollouts per prompt (a method config's model.rollout.num_generations overrides it)."""
    steps: int = 700
    """Most training steps per run."""
    max_rollouts: int = 500_000
    """Stop a run once it has generated this many rollouts (0: run ``steps`` steps): every strategy
    gets the same rollout budget, whatever it spends per step."""
    pass_alpha: float = 0.3
    """Initial pass rates ~ Beta(pass_alpha, pass_beta)."""
    pass_beta: float = 0.4
    """Initial pass rates ~ Beta(pass_alpha, pass_beta)."""
    min_pass: float = 1e-3
    """Initial pass rates are clipped to [min_pass, 1 − min_pass] (bounds the logits at ±6.9)."""
    eta: float = 0.02
    """Skill gained by a step whose gradient holds B effective groups (logit units)."""
    prompt_eta: float = 0.3
    """Extra logit a prompt gains for itself each time it carries gradient (0: off)."""
    signal: str = "groups"
    """How the gradient's size is measured: "groups", "rollouts" or "capped" (see module docstring)."""
    eval_every: int = 1
    """Log val/pass@1 every this many steps (it is exact and cheap)."""
    dataset_seed: int = 0
    """Seeds the prompts' difficulties (train and held-out): the same data for every run seed, as a
    real benchmark's data is fixed; the run seed varies the data order, the outcomes and the selectors."""

    def __post_init__(self) -> None:
        if self.signal not in ("groups", "rollouts", "capped"):
            raise ValueError(f"SimConfig.signal must be 'groups', 'rollouts' or 'capped', got {self.signal!r}")
        if not 0 < self.min_pass < 0.5:
            raise ValueError(f"SimConfig.min_pass must be in (0, 0.5), got {self.min_pass}")
        if self.num_prompts < 1 or self.batch_size < 1 or self.group_size < 1 or self.steps < 0 or self.max_rollouts < 0:
            raise ValueError("SimConfig: num_prompts, batch_size, group_size must be >= 1; steps, max_rollouts >= 0")


def _sigmoid(x: np.ndarray) -> np.ndarray:
    return 1.0 / (1.0 + np.exp(-x))


def _logit(p: np.ndarray) -> np.ndarray:
    return np.log(p) - np.log1p(-p)


class SimPolicy:
    """The simulated model: a global skill, per-prompt difficulties and per-prompt bonuses."""

    def __init__(self, cfg: SimConfig, seed: int) -> None:
        self.cfg = cfg
        self.seed = int(seed)
        rng = np.random.default_rng([int(cfg.dataset_seed), 0x51A])
        lo, hi = cfg.min_pass, 1 - cfg.min_pass
        self.difficulty = -_logit(rng.beta(cfg.pass_alpha, cfg.pass_beta, cfg.num_prompts).clip(lo, hi))  # [N]
        self.val_difficulty = -_logit(rng.beta(cfg.pass_alpha, cfg.pass_beta, cfg.num_val).clip(lo, hi))  # [M]
        self.bonus = np.zeros(cfg.num_prompts)  # [N]
        self.skill = 0.0
        self.step = 0
        """The training step being simulated (set by ``simulate`` before each step)."""

    def pass_rate(self, ids: np.ndarray) -> np.ndarray:
        """[n] P(correct) of train prompt ids now."""
        ids = np.asarray(ids, dtype=np.int64)
        return _sigmoid(self.skill + self.bonus[ids] - self.difficulty[ids])

    def outcomes(self, ids: np.ndarray, ks: np.ndarray, step: int) -> np.ndarray:
        """[n] bool: is the ks-th rollout of prompt ids at ``step`` correct (a pure function of seed, step, id, k)."""
        ids = np.asarray(ids, dtype=np.int64)
        ks = np.asarray(ks, dtype=np.int64)
        if ks.size and int(ks.max()) >= _MAX_ROLLOUTS_PER_PROMPT:
            raise ValueError(f"the simulator supports at most {_MAX_ROLLOUTS_PER_PROMPT} rollouts per prompt per step")
        u = seeded_uniform(self.seed, step, ids * _MAX_ROLLOUTS_PER_PROMPT + ks, salt="sim-outcome")
        return u < self.pass_rate(ids)

    def peek(self, ids: np.ndarray, n: int, step: int) -> np.ndarray:
        """[len(ids), n] bool: outcomes of the first n rollouts of each prompt at ``step`` (the oracle's view)."""
        ids = np.asarray(ids, dtype=np.int64)
        rep = np.repeat(ids, n)
        ks = np.tile(np.arange(n), len(ids))
        return self.outcomes(rep, ks, step).reshape(len(ids), n)

    def accuracy(self) -> float:
        """Exact expected pass rate on the held-out prompts."""
        return float(_sigmoid(self.skill - self.val_difficulty).mean())

    def learn(self, ids: np.ndarray, n_in_gradient: np.ndarray, batch_size: int, group_size: int) -> float:
        """Apply one step's update from its in-gradient groups; returns the skill gained."""
        ids = np.asarray(ids, dtype=np.int64)
        n = np.asarray(n_in_gradient, dtype=np.float64)
        if self.cfg.signal == "groups":
            w = np.ones_like(n)
        elif self.cfg.signal == "rollouts":
            w = n / group_size
        else:
            w = np.minimum(n, group_size) / group_size
        gain = self.cfg.eta * float(w.sum()) / batch_size
        self.skill += gain
        if self.cfg.prompt_eta:
            np.add.at(self.bonus, ids, self.cfg.prompt_eta * w)
        return gain


# --------------------------------------------------------------------------- the stand-ins


class SimSource(PromptSource):
    """Train prompts "sim <i>" (i = 0..N−1) for the real PromptDataModule; validation is computed exactly."""

    def __init__(self, num_prompts: int) -> None:
        super().__init__()
        self.num_prompts = int(num_prompts)

    def _load_splits(self) -> tuple[list[tuple[str, str, dict]], list[tuple[str, str, dict]]]:
        train = [(f"sim {i}", "1", {}) for i in range(self.num_prompts)]
        return train, [("sim-val 0", "1", {})]


class SimTokenizer:
    """Renders a prompt "sim <i>" to the single token id i (the loop's ``render_prompt`` calls it)."""

    chat_template = None
    pad_token_id = 0
    eos_token_id = 0

    def __call__(self, text: str, **kwargs: Any) -> dict[str, list[int]]:
        return {"input_ids": [int(text.split()[-1])]}


class SimEngine:
    """A ``RolloutEngine``: completion text ``str(id · 4096 + k)``, k counting that prompt's rollouts this step."""

    def __init__(self, sim: SimPolicy) -> None:
        self.sim = sim
        self._step = -1
        self._counts = np.zeros(sim.cfg.num_prompts, dtype=np.int64)
        self.calls = 0

    def generate(self, requests: Sequence[GenerationRequest], sampling: SamplingConfig) -> list[list[Completion]]:
        if self.sim.step != self._step:
            self._counts[:] = 0
            self._step = self.sim.step
        self.calls += 1
        out = []
        for req in requests:
            pid = int(req.prompt_token_ids[0])
            k0 = int(self._counts[pid])
            self._counts[pid] += req.n
            base = pid * _MAX_ROLLOUTS_PER_PROMPT
            # token ids and log-probs are never read in simulation: every completion shares one list
            out.append([Completion(_TOKENS, _LOGPROBS, "stop", str(base + k)) for k in range(k0, k0 + req.n)])
        return out

    def sync_weights(self, policy: Any) -> None:
        return None


class SimReward(RewardFunction):
    """1 if the simulated rollout ``str(id · 4096 + k)`` is correct, else 0 (drawn from the simulated policy)."""

    name = "accuracy"

    def __init__(self, sim: SimPolicy) -> None:
        super().__init__()
        self.sim = sim

    def score(self, completion: str, answer: str, metadata: dict[str, Any]) -> float:
        return float(self.score_batch([completion], [answer], [metadata])[0])

    def score_batch(self, completions: Sequence[str], answers: Sequence[str], metadata: Sequence[dict[str, Any]]) -> list:
        if not completions:
            return []
        code = np.fromiter(map(int, completions), dtype=np.int64, count=len(completions))
        ids, ks = np.divmod(code, _MAX_ROLLOUTS_PER_PROMPT)
        return self.sim.outcomes(ids, ks, self.sim.step).astype(np.float64).tolist()


@dataclass
class SimTrainer:
    """The few ``Trainer`` attributes the module and the selectors read."""

    callbacks: list
    datamodule: Any
    log_dir: Optional[str] = None
    world_size: int = 1
    global_rank: int = 0
    is_global_zero: bool = True
    strategy: Any = None


class _NoScheduler:
    def get_last_lr(self) -> list[float]:
        return [0.0]


class SimModule(GRPOModule):
    """``GRPOModule`` whose ``training_step`` runs unchanged; only the optimizer step and logging are simulated."""

    def __init__(self, sim: SimPolicy, group_size: int, seed: int) -> None:
        super().__init__(
            rollout=RolloutSettings(num_generations=int(group_size), max_new_tokens=8),
            rewards=[SimReward(sim)],
            seed=int(seed),
            checkpoint_every_n_steps=None,
        )
        self.sim = sim
        self._engine = SimEngine(sim)
        self.tokenizer = SimTokenizer()
        self.logged: dict[str, float] = {}
        self.last_gain = 0.0

    def _update(self, batch: RolloutBatch) -> dict[str, float]:
        """Stage 7, simulated: the in-gradient groups (kept, non-zero advantage) move the skill."""
        adv = batch.advantages if batch.advantages is not None else torch.zeros(len(batch))
        in_grad = batch.keep & (adv != 0)  # [N]
        pool_idx, n = torch.unique(batch.prompt_index[in_grad], return_counts=True)  # [K], [K]
        ids = batch.pool.ids[pool_idx].numpy()
        self.last_gain = self.sim.learn(ids, n.numpy(), batch.pool.batch_size, self.rollout_settings.num_generations)
        return {"loss": 0.0, "clip_fraction": 0.0, "kl": 0.0, "seconds": 0.0}

    def lr_schedulers(self) -> Any:  # type: ignore[override]
        return _NoScheduler()

    def log_dict(self, dictionary: Any, *args: Any, **kwargs: Any) -> None:  # type: ignore[override]
        self.logged = {k: float(v) for k, v in dictionary.items()}

    def log(self, name: str, value: Any, *args: Any, **kwargs: Any) -> None:  # type: ignore[override]
        return None


class Oracle(RolloutAllocator):
    """Rolls out only prompts whose G rollouts will be mixed: it peeks at the simulator's outcomes.

    Not a real method: the bound every selector is measured against. An allocator with one
    round: it screens the pool's eligible prompts in pool order (setting ``pool.keep`` False
    for those that would be zero-variance) and, when fewer than B pass, draws fresh prompts
    (``state.draw``) and screens them the same way, until it holds B effective prompts or the
    data runs out (``max_draws`` draws). Each chosen prompt gets G rollouts: B·G per step.
    """

    max_rounds = 1

    def __init__(self, sim: SimPolicy, group_size: int, max_draws: int = 50) -> None:
        super().__init__()
        self.sim = sim
        self.group_size = int(group_size)
        self.max_draws = int(max_draws)
        self._metrics: dict[str, float] = {}

    def _screen(self, state: RolloutState, indices: list[int]) -> list[int]:
        """The indices whose first G rollouts at this step will be mixed; the others are marked not kept."""
        idx = np.asarray(indices, dtype=np.int64)
        if idx.size == 0:
            return []
        outcomes = self.sim.peek(state.pool.ids.numpy()[idx], self.group_size, state.step)  # [n, G]
        mixed = outcomes.any(axis=1) & ~outcomes.all(axis=1)
        if (~mixed).any():
            state.pool.keep[torch.from_numpy(idx[~mixed])] = False
        self._metrics["prompts_screened_out"] += float((~mixed).sum())
        return idx[mixed].tolist()

    def plan(self, state: RolloutState) -> torch.Tensor:
        counts = torch.zeros(len(state.pool), dtype=torch.long)
        if state.round > 0:
            return counts
        B = state.pool.batch_size
        self._metrics = {"prompts_screened_out": 0.0, "prompts_drawn": 0.0}
        chosen = self._screen(state, state.pool.eligible())[:B]
        for _ in range(self.max_draws):
            if len(chosen) >= B:
                break
            new = state.draw(max(4 * (B - len(chosen)), 32))
            if not new:
                break
            self._metrics["prompts_drawn"] += float(len(new))
            chosen += self._screen(state, new)[: B - len(chosen)]
        counts = torch.zeros(len(state.pool), dtype=torch.long)  # the pool may have grown
        counts[chosen] = state.group_size
        self._metrics["groups"] = float(len(chosen))
        return counts

    def metrics(self) -> dict[str, float]:
        return dict(self._metrics)


# --------------------------------------------------------------------------- strategies


@dataclass
class StrategySpec:
    """A strategy: callbacks (class_path + init_args, in order), pool multiple and group size."""

    name: str
    callbacks: list[dict[str, Any]] = field(default_factory=list)
    pool_multiple: float = 1.0
    group_size: Optional[int] = None
    oracle: bool = False
    source: str = ""

    def build(self, sim: SimPolicy, group_size: int) -> list[SelectionCallback]:
        out: list[SelectionCallback] = [Oracle(sim, group_size)] if self.oracle else []
        for cb in self.callbacks:
            module_name, cls_name = cb["class_path"].rsplit(".", 1)
            cls = getattr(importlib.import_module(module_name), cls_name)
            out.append(cls(**dict(cb.get("init_args") or {})))
        return out


def strategy_spec(name: str, configs_dir: Optional[str | Path] = None) -> StrategySpec:
    """The strategy ``name``: ``configs/methods/<name>.yaml`` ("+" reads as "_"), or the built-in ``oracle``."""
    key = name.replace("+", "_")
    if key == "oracle":
        return StrategySpec(
            "oracle",
            [],
            pool_multiple=4.0,
            oracle=True,
            source="lit_rlvr.bench.simulator.Oracle (built in; pool_multiple 4)",
        )
    path = Path(configs_dir) if configs_dir is not None else METHODS_DIR
    file = path / f"{key}.yaml"
    if not file.exists():
        known = sorted(p.stem for p in path.glob("*.yaml")) + ["oracle"]
        raise ValueError(f"unknown strategy {name!r}: no {file}; choose one of {known}")
    config = yaml.safe_load(file.read_text()) or {}
    callbacks = list(((config.get("trainer") or {}).get("callbacks")) or [])
    data = config.get("data") or {}
    rollout = ((config.get("model") or {}).get("rollout")) or {}
    return StrategySpec(
        key,
        callbacks,
        pool_multiple=float(data.get("pool_multiple", 1.0)),
        group_size=int(rollout["num_generations"]) if "num_generations" in rollout else None,
        source=str(file),
    )


# --------------------------------------------------------------------------- the run


@dataclass
class SimResult:
    """One simulated run: its per-step log rows (trainer column names) and where they were written."""

    strategy: str
    seed: int
    rows: list[dict[str, float]]
    wall_seconds: float
    metrics_path: Optional[str] = None
    selection_path: Optional[str] = None

    def column(self, name: str) -> np.ndarray:
        return np.array([r.get(name, np.nan) for r in self.rows], dtype=np.float64)


def simulate(
    strategy: str | StrategySpec,
    seed: int,
    cfg: SimConfig,
    out_dir: Optional[str | Path] = None,
    record_selection: bool = False,
    configs_dir: Optional[str | Path] = None,
) -> SimResult:
    """Run one strategy through ``GRPOModule.training_step`` with the simulated policy.

    The run stops after ``cfg.steps`` steps or once ``cfg.max_rollouts`` rollouts were generated.

    With ``out_dir``, writes ``<out_dir>/<strategy>/seed<seed>/csv/version_0/metrics.csv`` (and
    ``selection.csv`` there with ``record_selection``), the layout of a CSVLogger run.
    """
    from lit_rlvr.bench.recorder import SelectionRecorder

    t_start = time.perf_counter()
    spec = strategy if isinstance(strategy, StrategySpec) else strategy_spec(strategy, configs_dir)
    group_size = spec.group_size or cfg.group_size
    sim = SimPolicy(cfg, seed)
    dm = PromptDataModule(SimSource(cfg.num_prompts), batch_size=cfg.batch_size, pool_multiple=spec.pool_multiple, seed=seed)
    dm.setup()
    module = SimModule(sim, group_size, seed)
    selectors = spec.build(sim, group_size)
    callbacks: list[Any] = list(selectors)
    run_dir = None
    if out_dir is not None:
        run_dir = Path(out_dir) / spec.name / f"seed{seed}" / "csv" / "version_0"
        run_dir.mkdir(parents=True, exist_ok=True)
        for stale in ("metrics.csv", "selection.csv"):
            if (run_dir / stale).exists():
                (run_dir / stale).unlink()
    recorder = None
    if record_selection:
        path = str(run_dir / "selection.csv") if run_dir is not None else None
        recorder = SelectionRecorder(path=path)
        callbacks.append(recorder)  # last: it reads pool.keep after every selector ran
    trainer = SimTrainer(callbacks=callbacks, datamodule=dm, log_dir=str(run_dir) if run_dir else None)
    module.trainer = trainer
    watch = Stopwatch()
    instrument(selectors + [module._default_allocator], dm, watch)
    module.on_fit_start()  # the module's own composition checks and setup_selection

    rows: list[dict[str, float]] = [
        {
            "step": 0.0,
            "val/pass@1": sim.accuracy(),
            "cumulative/rollouts_generated": 0.0,
            "cumulative/rollouts_effective": 0.0,
            "cumulative/rollouts_in_gradient": 0.0,
            "sim/skill": sim.skill,
        }
    ]
    for i in range(cfg.steps):
        step = module.steps_done
        sim.step = step
        pool = dm.pool(step)
        watch.reset()
        for cb in callbacks:  # Lightning's on_train_batch_start, every callback in list order
            cb.on_train_batch_start(trainer, module, pool, i)
        module.training_step(pool, i)
        row = {"step": float(module.steps_done), "epoch": float(dm.epoch_of(step)), **module.logged}
        row["time/selection_ms"] = watch.selection_ms
        row["sim/skill"] = sim.skill
        row["sim/skill_gain"] = module.last_gain
        done = i == cfg.steps - 1 or (cfg.max_rollouts and module.totals.rollouts_generated >= cfg.max_rollouts)
        if cfg.eval_every and (module.steps_done % cfg.eval_every == 0 or done):
            row["val/pass@1"] = sim.accuracy()
        rows.append(row)
        if done:
            break
    if recorder is not None:
        recorder.on_train_end(trainer, module)

    result = SimResult(spec.name, int(seed), rows, time.perf_counter() - t_start)
    if run_dir is not None:
        result.metrics_path = str(run_dir / "metrics.csv")
        write_metrics_csv(rows, result.metrics_path)
        with open(run_dir / "sim_config.yaml", "w") as f:
            yaml.safe_dump(
                {"strategy": spec.name, "source": spec.source, "seed": int(seed), "pool_multiple": spec.pool_multiple,
                 "group_size": group_size, "sim": asdict(cfg), "wall_seconds": round(result.wall_seconds, 2)},
                f,
                sort_keys=False,
            )
        if recorder is not None:
            result.selection_path = str(run_dir / "selection.csv")
    return result


def write_metrics_csv(rows: list[dict[str, float]], path: str | Path) -> None:
    """Rows as a CSVLogger-style metrics.csv: ``step`` first, then every column seen (sorted); blanks for missing."""
    keys: set[str] = set()
    for r in rows:
        keys.update(r)
    columns = ["step"] + sorted(k for k in keys if k != "step")
    with open(path, "w", newline="") as f:
        w = csv.DictWriter(f, fieldnames=columns, restval="")
        w.writeheader()
        for r in rows:
            w.writerow({k: (int(v) if k == "step" else _fmt(v)) for k, v in r.items()})


def _fmt(v: float) -> Any:
    if isinstance(v, float) and math.isfinite(v) and v == int(v) and abs(v) < 1e15:
        return int(v)
    return v
