"""Reward functions: reasoning-gym verifiers, math-verify, code execution, callables, each under a hard time limit.

Configure them from YAML by class path, e.g.::

    rewards:
      - class_path: lit_rlvr.rewards.MathVerifyReward
        init_args: {timeout_s: 5.0, extraction: tag}
      - class_path: lit_rlvr.rewards.FormatReward
        init_args: {weight: 0.1}

``RewardScorer`` runs them over a batch and never lets one failing call stop training.
Verifiers that see model output run in sandboxed worker processes (``workers/``),
a batch spread over them, each call limited to ``timeout_s`` (default 10 s).
"""

from lit_rlvr.rewards.answer import ANSWER_MODES, extract_answer
from lit_rlvr.rewards.base import (
    MAX_ABS_REWARD,
    RewardCallError,
    RewardFunction,
    RewardResult,
    RewardScorer,
    RewardTimeout,
)
from lit_rlvr.rewards.callable import CallableReward
from lit_rlvr.rewards.code_exec import CodeExecutionReward
from lit_rlvr.rewards.format import FormatReward
from lit_rlvr.rewards.math_verify import MathVerifyReward, verify_math
from lit_rlvr.rewards.reasoning_gym import ReasoningGymReward
from lit_rlvr.rewards.workers.confinement import SandboxLimits
from lit_rlvr.rewards.workers.pool import DEFAULT_TIMEOUT_S, CallOutcome, TimeLimitedCaller, resolve_callable

__all__ = [
    "ANSWER_MODES",
    "DEFAULT_TIMEOUT_S",
    "MAX_ABS_REWARD",
    "CallOutcome",
    "CallableReward",
    "CodeExecutionReward",
    "FormatReward",
    "MathVerifyReward",
    "ReasoningGymReward",
    "RewardCallError",
    "RewardFunction",
    "RewardResult",
    "RewardScorer",
    "RewardTimeout",
    "SandboxLimits",
    "TimeLimitedCaller",
    "extract_answer",
    "resolve_callable",
    "verify_math",
]
