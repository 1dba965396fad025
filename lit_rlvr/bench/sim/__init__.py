"""A simulated policy driven through the REAL training step, to compare selection strategies.

What is real and what is simulated
----------------------------------
Real: every selector callback (built from ``configs/methods/*.yaml`` by class path and
init args), ``PromptDataModule`` (seeded epoch permutations, ``pool_multiple × B``
candidates per step, ``draw`` for refills), ``RolloutLoop`` (rounds planned by the real
allocator, one engine call per round, each round scored by a ``RewardScorer``; with a
pruner, ``rollout.pruning.run_pruned_round``), and ``GRPOModule.training_step`` itself:
``SimModule`` subclasses ``GRPOModule`` and replaces only the parts that touch a neural
network (its ``updater``, stage 7: ``standins.SimUpdater``) and Lightning's logger. So the observe hook, the
filters ANDed in list order, ``grpo_advantages`` and the ``accounting`` counters are the
trainer's own code. Where a selector itself needs a network (LEEPS's prompt encoder, ARRoL's
hidden states), ``adapters`` plugs a stand-in into that selector's own interface.

Simulated: the policy (``policy.SimPolicy``), the engine, reward, tokenizer and trainer
(``standins``).

Modules, one job each
---------------------
* ``config``: ``SimConfig``, every constant of the dynamics and scale.
* ``learning``: ``group_weights``, how much a group in the gradient moves the skill (the signals).
* ``policy``: ``SimPolicy``: difficulties, seeded outcomes, skill, synthetic embeddings, head signal.
* ``standins``: ``SimEngine``, ``SimReward``, ``SimTokenizer``, ``SimSource``, ``SimTrainer``, ``SimUpdater``, ``SimModule``.
* ``adapters``: LEEPS's encoder and ARRoL's scale in the simulator.
* ``oracle``: ``Oracle``, the allocator that peeks at outcomes (the bound).
* ``strategies``: ``strategy_spec``: a strategy from its method config.
* ``run``: ``simulate``, one run, and its CSVLogger-style output.
* ``compare``: ``compare_signals``, the same runs under two learning signals, side by side.

Dynamics (every constant is a ``SimConfig`` field)
--------------------------------------------------
* **Difficulty.** Prompt i's initial pass rate p0_i ~ Beta(pass_alpha, pass_beta)
  (default Beta(0.3, 0.4): U-shaped, mean 0.43, about 27% of prompts below 0.05 and 15%
  above 0.95), clipped to [min_pass, 1 − min_pass]; its latent difficulty is d_i = −logit(p0_i).
* **Success.** P(correct_i) = sigmoid(skill + bonus_i − d_i), skill starting at 0. The
  k-th rollout of prompt i at step t is correct iff u(seed, t, i, k) < P(correct_i), with u a
  seeded uniform (``selection_toolkit.seeded_uniform``, splitmix64): outcomes are a pure function of
  (seed, step, prompt, k), which is what lets the oracle peek at them before rollout.
* **Learning.** After each step, from the rollouts that entered the gradient (kept, with a
  non-zero advantage), grouped by prompt: skill ← skill + eta · Σ_g w_g / B, w_g by ``signal``
  (``learning``): "groups" (default) w_g = 1; "rollouts" n_g / G; "capped" min(n_g, G) / G;
  "variance" (n_g / G) · 4 p̂_g (1 − p̂_g).
* **Per-prompt learning** (``prompt_eta``): bonus_i ← bonus_i + prompt_eta · w_g, so prompts
  trained on become easier for themselves (memorisation); it does not transfer to held-out prompts.
* **Accuracy** (``val/pass@1``): the exact expected pass rate on ``num_val`` held-out
  prompts from the same distribution: mean_j sigmoid(skill − d_j). No sampling noise.
* **LEEPS embeddings** (``embed_difficulty`` ρ, ``embed_dim``): unit vectors whose cosine is
  ρ·cos(π Δp0) + (1 − ρ)·(cosine of seeded noise): neighbours share difficulty as much as ρ says.
* **ARRoL** (``head_accuracy``, ``prune_cost``, ``completion_tokens``): every rollout is
  ``completion_tokens`` long; ARRoL decides at round(prune_cost · completion_tokens) tokens on a
  stand-in hidden state that matches the final outcome with probability ``head_accuracy``.
* **Scale and seeds.** Defaults: 10,000 train prompts, B = 128, G = 8 (a method config's
  ``num_generations`` wins), each run stops at ``max_rollouts`` = 500,000 generated rollouts
  or ``steps`` = 700. The difficulties and embeddings come from ``dataset_seed`` (fixed); the
  run seed drives the data order, the outcomes, the head signal and the selectors' draws.

Left out on purpose (read results with it): learning is linear in the gradient's size (no
diminishing returns from a larger effective batch); zero-variance rollouts left in a batch
cost only their generation (the real token-mean loss would dilute the step); PODS's saving
(a cheaper update) and wall-clock generation cost are not modelled; ARRoL's saving shows in
tokens (``tokens/generated``), not in the rollout count, and its head signal's errors are
independent of the prompt and of everything else.
"""

from lit_rlvr.bench.sim.adapters import SimPromptEncoder
from lit_rlvr.bench.sim.config import SIGNALS, SimConfig
from lit_rlvr.bench.sim.learning import group_weights
from lit_rlvr.bench.sim.oracle import Oracle
from lit_rlvr.bench.sim.policy import SimPolicy
from lit_rlvr.bench.sim.run import SimResult, simulate, write_metrics_csv
from lit_rlvr.bench.sim.standins import SimEngine, SimModule, SimReward, SimSource, SimTokenizer, SimTrainer
from lit_rlvr.bench.sim.strategies import DEFAULT_STRATEGIES, METHODS_DIR, StrategySpec, strategy_spec

__all__ = [
    "DEFAULT_STRATEGIES",
    "METHODS_DIR",
    "Oracle",
    "SIGNALS",
    "SimConfig",
    "SimEngine",
    "SimModule",
    "SimPolicy",
    "SimPromptEncoder",
    "SimResult",
    "SimReward",
    "SimSource",
    "SimTokenizer",
    "SimTrainer",
    "StrategySpec",
    "group_weights",
    "simulate",
    "strategy_spec",
    "write_metrics_csv",
]
