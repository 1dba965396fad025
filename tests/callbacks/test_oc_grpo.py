"""OC-GRPO (arXiv 2607.19313): solutions in the data, the prefix cut, the cascade, the weights,
the loss gradient, bad input, and real tiny fits (resume and 2-rank DDP agree)."""

import glob
import json
import math
import os
import subprocess
import sys
from pathlib import Path
from types import SimpleNamespace

import pytest
import torch

from lit_rlvr.callbacks import OCGRPO, GroupReviser
from lit_rlvr.callbacks.oc_guidance import Attempt, climb_cascade, guided_messages, importance_weights, solution_prefix
from lit_rlvr.run.cli import main
from lit_rlvr.collate import collate_rollouts
from lit_rlvr.data import HFDatasetSource, PromptDataModule, ReasoningGymSource
from lit_rlvr.data.solutions import worked_arithmetic
from lit_rlvr.losses import Normalizer, aggregate, clipped_surrogate
from lit_rlvr.module import GRPOModule, LossSettings, RolloutSettings
from lit_rlvr.policy import PolicyConfig
from lit_rlvr.rewards import CallableReward, RewardScorer
from lit_rlvr.rollout.base import SamplingConfig
from lit_rlvr.types import RolloutStats
from lit_rlvr.prompts import render_prompt
from lit_rlvr.rollout.generate_score import generate_scored
from lit_rlvr.rollout.revise import revise
from lit_rlvr.accounting import step_metrics
from lit_rlvr.types import Completion, PromptPool, RolloutBatch

from tests.callbacks.fixtures import at_step
from tests.assertions import assert_same
from tests.metrics_files import step_rows

ROOT = Path(__file__).resolve().parents[2]
TINY = str(ROOT / "configs" / "tiny.yaml")
OC = str(ROOT / "configs" / "methods" / "oc_grpo.yaml")


# --------------------------------------------------------------------------- solutions in the data


def test_arithmetic_worked_solutions_reduce_one_operation_at_a_time():
    assert worked_arithmetic("876 * -29 * 190", "-4826760") == "876 * -29 * 190 = -25404 * 190 = -4826760"
    assert worked_arithmetic("( 2 + -7 - 4 )", "-9") == "2 + -7 - 4 = -5 - 4 = -9"
    assert worked_arithmetic("-( 65 - -81 ) - -67 * 56", "3606") == "-(65 - -81) - -67 * 56 = -146 - -67 * 56 = -146 - -3752 = 3606"
    assert worked_arithmetic("5 - 3", "3") is None  # a wrong guide is worse than none
    assert worked_arithmetic("7 / 2", "3.5") is None  # non-integer step
    assert worked_arithmetic("2 ** 3", "8") is None  # not + − × ÷


def test_reasoning_gym_records_carry_solutions_ending_in_the_answer():
    src = ReasoningGymSource(["basic_arithmetic", "chain_sum"], train_size=20, val_size=2, seed=1)
    train = src.load("train")
    with_solution = [r for r in train if r.solution]
    assert len(with_solution) >= 35  # a few basic_arithmetic entries round a division: no solution
    assert all(r.solution.rsplit(" = ", 1)[-1] == r.answer for r in with_solution)
    dm = PromptDataModule(src, batch_size=4)
    pool = dm.pool(0)
    assert pool.solutions == [train[i].solution for i in pool.ids.tolist()]  # the pool carries them, by row


def _write_jsonl(path, rows):
    path.write_text("".join(json.dumps(r) + "\n" for r in rows))
    return str(path)


def test_hf_solution_field_is_read_and_bad_values_name_file_and_row(tmp_path):
    rows = [{"question": f"q{i}", "answer": str(i), "sol": f"step {i} gives {i}"} for i in range(4)]
    src = HFDatasetSource(_write_jsonl(tmp_path / "ok.jsonl", rows), val_split=None, val_size=1, solution_field="sol")
    assert sorted(r.solution for r in src.load("train") + src.load("validation")) == [r["sol"] for r in rows]
    bad = [dict(r) for r in rows]
    bad[2]["sol"] = "   "
    with pytest.raises(ValueError, match=r"empty.jsonl.*line 3: field 'sol' \(`solution_field`\) is empty"):
        HFDatasetSource(_write_jsonl(tmp_path / "empty.jsonl", bad), val_split=None, val_size=1, solution_field="sol").load("train")
    bad = [dict(r) for r in rows]
    bad[1]["sol"] = None
    with pytest.raises(ValueError, match=r"missing.jsonl.*line 2: field 'sol' \(`solution_field`\) is missing"):
        HFDatasetSource(_write_jsonl(tmp_path / "missing.jsonl", bad), val_split=None, val_size=1, solution_field="sol").load("train")
    numbers = [{**r, "sol": i} for i, r in enumerate(rows)]
    with pytest.raises(ValueError, match=r"num.jsonl.*line 1: field 'sol' \(`solution_field`\) is not text"):
        HFDatasetSource(_write_jsonl(tmp_path / "num.jsonl", numbers), val_split=None, val_size=1, solution_field="sol").load("train")
    with pytest.raises(ValueError, match=r"no column 'solution' \(`solution_field`\)"):
        HFDatasetSource(_write_jsonl(tmp_path / "nocol.jsonl", rows), val_split=None, val_size=1, solution_field="solution").load("train")


def test_setup_fails_without_solutions_and_with_two_revisers(tmp_path):
    rows = [{"question": f"q{i}", "answer": str(i)} for i in range(6)]
    dm = PromptDataModule(HFDatasetSource(_write_jsonl(tmp_path / "plain.jsonl", rows), val_split=None, val_size=1), batch_size=2)
    oc = OCGRPO()
    with pytest.raises(ValueError, match=r"no train prompt of HFDatasetSource\(path='.*plain.jsonl'.*solution_field"):
        oc.setup_selection(SimpleNamespace(datamodule=dm), None, [oc])

    class OtherReviser(GroupReviser):
        pass

    with pytest.raises(ValueError, match="OCGRPO and OtherReviser are both group revisers"):
        oc.setup_selection(SimpleNamespace(datamodule=None), None, [oc, OtherReviser()])


def test_fsdp2_is_refused_with_what_to_do():
    # Under FSDP2 every forward is a collective, but each rank climbs the cascade for its own groups.
    sharded = SimpleNamespace(lockstep=True)  # SelectionHost.lockstep
    with pytest.raises(ValueError, match="OCGRPO does not run under FSDP2.*cascade.*trainer.strategy=ddp"):
        OCGRPO().setup_selection(SimpleNamespace(datamodule=None), sharded, [])
    OCGRPO().setup_selection(SimpleNamespace(datamodule=None), SimpleNamespace(lockstep=False), [])  # DDP: fine


# --------------------------------------------------------------------------- prefix cut and guided prompt


def test_solution_prefix_cuts_by_characters_back_to_a_word_boundary():
    text = "The answer is forty two"  # 23 characters; spaces at 3, 10, 13, 19
    assert solution_prefix(text, 0.2) == "The"  # target int(4.6) = 4 -> back to the space at 3
    assert solution_prefix(text, 0.4) == "The"  # target int(9.2) = 9 ('r') -> back to 3
    assert solution_prefix(text, 0.6) == "The answer is"  # target int(13.8) = 13 is a space: cut there
    assert solution_prefix(text, 0.8) == "The answer is"  # target int(18.4) = 18 ('y') -> back to 13
    assert solution_prefix(text, 1.0) == text
    assert solution_prefix("step one\nstep two", 0.5) == "step one"  # target 8 is the newline
    assert solution_prefix("abcdefghij", 0.5) == "abcde"  # no boundary before the target: cut at it
    assert solution_prefix("5 - 3 = 2", 0.2) == "5"  # target max(1, int(1.8)) = 1 is a space
    assert solution_prefix("a  b c d e f", 0.3) == "a"  # target 3 ('b') -> space at 2, trailing spaces dropped
    assert solution_prefix("  See [asy]draw(a);[/asy] it  ", 1.0) == "See  it"  # diagrams dropped, stripped


def test_guided_prompt_wraps_the_user_turn_and_keeps_the_system_turn():
    messages = [{"role": "system", "content": "Answer in <answer> tags."}, {"role": "user", "content": "Calculate 2 + 3."}]
    partial = guided_messages(messages, "2 +", 0.4)
    assert partial[0] == messages[0]
    assert partial[1]["content"].startswith("Problem: Calculate 2 + 3.\n\nPartial reference solution: 2 +\n\nHere is a partial reference solution")
    full = guided_messages(messages, "2 + 3 = 5", 1.0)
    assert full[1]["content"].startswith("Problem: Calculate 2 + 3.\n\nReference solution: 2 + 3 = 5\n\nHere is the full reference solution. Verify it")
    assert messages[1]["content"] == "Calculate 2 + 3."  # the pool's messages are untouched


# --------------------------------------------------------------------------- the cascade


def test_cascade_stops_at_the_first_fraction_with_a_correct_rollout():
    # key 0 is solved at 0.4, key 1 at 0.2, key 2 never; key 3's prefix is empty below 0.6.
    solve_at = {0: 0.4, 1: 0.2, 2: 9.0, 3: 0.6}
    solutions = {0: "a b c d e f g h i j", 1: "k l m n o p", 2: "q r s t u v", 3: "abcdefghijklmnop qrs"}
    calls = []

    def attempt(level, fraction, todo):
        calls.append((level, fraction, [k for k, _ in todo]))
        return [Attempt(correct=torch.tensor([False, fraction >= solve_at[k]]), tokens=3) for k, _ in todo]

    solutions[3] = "abcdefghijklmnop"  # no space: prefixes are cut at the target, never empty
    result = climb_cascade(solutions, (0.2, 0.4, 0.6, 0.8, 1.0), attempt)
    assert calls == [(0, 0.2, [0, 1, 2, 3]), (1, 0.4, [0, 2, 3]), (2, 0.6, [2, 3]), (3, 0.8, [2]), (4, 1.0, [2])]
    assert {k: f for k, (f, _) in result.solved.items()} == {0: 0.4, 1: 0.2, 3: 0.6}
    assert result.unsolved == [2]  # unsolved at 1.0: its group stays as it was
    assert result.calls == 5
    # failed tries: key 0 once, key 3 twice, key 2 five times, 2 rollouts and 3 tokens each
    assert result.discarded_rollouts == 2 * 8 and result.discarded_tokens == 3 * 8


class _CharTokenizer:
    """Characters as token ids (no chat template: render_prompt joins the turns)."""

    chat_template = None
    pad_token_id = 0
    eos_token_id = 0

    def __call__(self, text, add_special_tokens=True):
        return {"input_ids": [ord(c) for c in text]}


class _EchoEngine:
    """Each completion's text is its prompt's text: the reward below sees how much solution it was shown."""

    def __init__(self):
        self.calls = []

    def generate(self, requests, sampling):
        self.calls.append(([bytes(r.prompt_token_ids).decode() for r in requests], [r.n for r in requests], sampling.seed))
        return [[Completion([1] * (k + 1), [0.0] * (k + 1), "stop", text=bytes(r.prompt_token_ids).decode()) for k in range(r.n)] for r in requests]



def _fake_module(engine):
    loop = SimpleNamespace(engine=engine, tokenizer=_CharTokenizer(), scorer=RewardScorer([CallableReward(fn="tests.helpers:shown_key")]),
                           sampling=SamplingConfig(1.0, 1.0, 8))
    oc = OCGRPO()
    module = SimpleNamespace(accuracy_reward="shown_key", render_prompt=lambda messages: render_prompt(loop.tokenizer, messages),
                             generate_and_score=lambda *args: generate_scored(loop, *args))
    return module, oc


def test_revise_replaces_solved_groups_whole_and_leaves_unsolved_ones():
    solutions = [
        "one two three KEY five six seven eight nine ten",  # KEY at characters 14-16 of 47: shown from 0.4
        "no key word in this one at all",  # never solved: stays all-zero
        None,  # no solution: never guided
        "KEY",  # a mixed group: not all wrong, untouched
    ]
    pool = PromptPool(ids=[10, 11, 12, 13], messages=[[{"role": "user", "content": f"q{i}"}] for i in range(4)],
                      answers=["a"] * 4, metadata=[{} for _ in range(4)], batch_size=4, solutions=solutions)
    prompt_index = torch.tensor([0, 1, 2, 3, 0, 1, 2, 3])  # groups of 2, interleaved
    rewards = torch.tensor([0.0, 0.0, 0.0, 1.0, 0.0, 0.0, 0.0, 0.0])
    batch = RolloutBatch(pool=pool, prompt_index=prompt_index, prompt_token_ids=[[ord("q"), 48 + i] for i in range(4)],
                         completions=[Completion([5, 5, 5], [0.0] * 3, "stop", text="x") for _ in range(8)],
                         rewards=rewards.clone(), round=torch.zeros(8, dtype=torch.long), keep=torch.ones(8, dtype=torch.bool),
                         reward_components={"shown_key": rewards.clone()})
    engine = _EchoEngine()
    module, oc = _fake_module(engine)
    stats = RolloutStats()
    batch = revise(oc, None, module, at_step(batch, SimpleNamespace(steps_done=3, seed=7)), stats)

    # one batched call per fraction for the groups still unsolved: {0, 1} at 0.2 and 0.4, then {1}
    assert [n for _, n, _ in engine.calls] == [[2, 2], [2, 2], [2], [2], [2]]
    assert "Partial reference solution: one two\n" in engine.calls[0][0][0]  # target int(9.4) = 9 -> back to 7
    assert "Partial reference solution: one two three KEY\n" in engine.calls[1][0][0]  # target 18 -> back to 17
    assert "Reference solution: no key word in this one at all\n" in engine.calls[4][0][0]
    assert len({seed for _, _, seed in engine.calls}) == 5  # a seed per level
    assert stats.extra["revise_calls"] == 5.0
    # group 0 (rows 0, 4) replaced whole by its 0.4 attempt; the rest untouched
    assert batch.rewards.tolist() == [1.0, 0.0, 0.0, 1.0, 1.0, 0.0, 0.0, 0.0]
    assert batch.reward_components["shown_key"].tolist() == batch.rewards.tolist()
    assert [p is not None for p in batch.generated_from] == [True, False, False, False, True, False, False, False]
    assert bytes(batch.generated_from[0]).decode() == engine.calls[1][0][0]
    assert batch.prompt_index.tolist() == prompt_index.tolist()  # rows keep their pool prompt: the loss uses x
    # every rollout counted: the 8 rows + 14 guided ones besides the 8 original
    # (group 0: 2 at 0.2 + 2 at 0.4; group 1: 2 at each of 5 fractions = 10) -> 8 + 14 = 22
    assert batch.discarded_rollouts == 14
    metrics = step_metrics(batch, batch.rewards >= 1)
    assert metrics["rollouts/generated"] == 22.0
    # tokens (the echo engine's k-th sample has k + 1 tokens): in the batch, 6 untouched rows × 3 +
    # group 0's guided rows 1 + 2 = 21; discarded, group 0's originals 2 × 3 = 6, its failed 0.2 try
    # 1 + 2 = 3 and group 1's five tries 5 × 3 = 15: 21 + 24 = 45
    assert batch.discarded_tokens == 24
    assert metrics["tokens/generated"] == 45.0
    assert oc.last_metrics["oc/guided_groups"] == 1.0
    assert oc.last_metrics["oc/unsolved_after_guidance"] == 1.0
    assert oc.last_metrics["oc/no_solution_groups"] == 1.0
    assert oc.last_metrics["oc/mean_fraction"] == pytest.approx(0.4)
    state = oc.state_dict()
    assert state["table"]["guided"][10] == 1 and state["table"]["unsolved"][11] == 1
    assert state["table"]["last_fraction"][10] == pytest.approx(0.4)
    assert state["solved_at"].tolist() == [0, 1, 0, 0, 0]


# --------------------------------------------------------------------------- the weights


def test_importance_weights_follow_the_formula_and_clamp_at_both_ends():
    plain = torch.tensor([[-1.0, -2.0, -0.5, -3.0, -7.0]])  # log π_old(y_t|x)
    guided = torch.tensor([[-1.0, -0.5, -4.0, -2.9, -1.0]])  # log π_old(y_t|x̃)
    # differences x − x̃: 0, −1.5, +3.5, −0.1, −6
    # exp: 1, e^−1.5 = 0.223130, e^3.5 = 33.1 -> clamped to 1, e^−0.1 = 0.904837, e^−6 = 0.00248 -> clamped to 0.01
    expected = torch.tensor([[1.0, 0.2231302, 1.0, 0.9048374, 0.01]])
    assert torch.allclose(importance_weights(plain, guided), expected, atol=1e-6)
    # γ = 0.5 halves the log-ratio: e^−0.75 = 0.472367, e^−3 = 0.049787
    half = importance_weights(plain, guided, gamma=0.5)
    assert torch.allclose(half, torch.tensor([[1.0, 0.4723666, 1.0, 0.9512294, 0.0497871]]), atol=1e-6)


def _tiny_module(**loss):
    module = GRPOModule(policy=PolicyConfig(name_or_path="tiny"), rollout=RolloutSettings(num_generations=2, max_new_tokens=6),
                        loss=LossSettings(**loss), rewards=[CallableReward(fn="tests.helpers:parity_reward")])
    module.configure_model()
    return module


def _guided_batch(module, seed=0):
    """3 rows of one prompt: rows 0 and 2 generated from a guided prompt, row 1 from its own."""
    g = torch.Generator().manual_seed(seed)
    vocab = module.policy.config.vocab_size
    x = torch.randint(5, vocab, (6,), generator=g).tolist()
    x_guided = torch.randint(5, vocab, (11,), generator=g).tolist()
    comps = [Completion(torch.randint(5, vocab, (n,), generator=g).tolist(), [0.0] * n, "stop") for n in (5, 4, 3)]
    pool = PromptPool(ids=[0], messages=[[{"role": "user", "content": "q"}]], answers=["a"], metadata=[{}], batch_size=1)
    return RolloutBatch(pool=pool, prompt_index=torch.zeros(3, dtype=torch.long), prompt_token_ids=[x], completions=comps,
                        rewards=torch.tensor([1.0, 0.0, 1.0]), round=torch.zeros(3, dtype=torch.long),
                        keep=torch.ones(3, dtype=torch.bool), generated_from=[x_guided, None, x_guided],
                        advantages=torch.tensor([0.7, -1.4, 0.7]))


def _direct_logprobs(model, prompt, completion, temperature):
    """log π(y_t | prompt, y_<t) from one unpadded forward: the reference the padded path must match."""
    ids = torch.tensor([prompt + completion])
    logits = model(input_ids=ids).logits[0, len(prompt) - 1 : -1] / temperature  # [L, V]
    return torch.log_softmax(logits.float(), -1).gather(1, torch.tensor(completion)[:, None])[:, 0]


def test_weights_on_guided_rows_and_exactly_one_on_unguided_rows():
    module = _tiny_module()
    batch = _guided_batch(module)
    oc = OCGRPO()
    module.policy.train()
    weights = oc.token_weights(None, module, batch)
    assert module.policy.training  # its mode is restored
    assert weights[1].tolist() == [1.0] * 4  # unguided: exactly 1
    T = module.rollout_settings.temperature
    with torch.no_grad():
        module.policy.eval()
        for r in (0, 2):
            y = batch.completions[r].token_ids
            plain = _direct_logprobs(module.policy, batch.prompt_token_ids[0], y, T)
            guided = _direct_logprobs(module.policy, batch.generated_from[r], y, T)
            expected = torch.exp(plain - guided).clamp(0.01, 1.0)
            assert torch.allclose(weights[r], expected, atol=1e-5), (r, weights[r], expected)
    assert oc.last_metrics["oc/is_weight_min"] == pytest.approx(float(torch.cat([weights[0], weights[2]]).min()))
    assert oc.last_metrics["oc/is_weight_mean"] == pytest.approx(float(torch.cat([weights[0], weights[2]]).mean()), rel=1e-6)
    batch.keep[2] = False  # rows out of the gradient are not weighted
    assert oc.token_weights(None, module, batch)[2].tolist() == [1.0] * 3
    off = OCGRPO(importance_weight=False).token_weights(None, module, batch)  # plain guided training
    assert all(w.tolist() == [1.0] * len(w) for w in off)


def test_with_several_iterations_pi_old_on_x_is_the_modules_pre_update_old_logprobs():
    module = _tiny_module(num_iterations=2)
    module.policy.eval()
    batch = _guided_batch(module, seed=1)
    plain, _ = OCGRPO().context_logprobs(module, batch, [0, 2])  # [2, L]
    tensors = collate_rollouts(batch, torch.tensor([0, 2]), module._pad_id)
    with torch.no_grad():  # what the update's first iteration records as π_old, before any optimizer step
        old = module.updater.logprobs(module.policy, tensors)
    assert torch.allclose(plain * tensors.completion_mask, old * tensors.completion_mask, atol=1e-5)


# --------------------------------------------------------------------------- the loss gradient


def test_guided_row_gradient_is_advantage_times_weight_times_the_grpo_gradient():
    # One guided row of 3 tokens, A = 0.5, w = (1, 0.25, 0.01), first iteration (ρ = 1: π_θ = π_old).
    # Token-mean loss = Σ_t −A·w_t·ρ_t / 3, ρ_t = exp(logp_t − old_t), so ∂loss/∂logp_t = −A·w_t / 3:
    #   plain GRPO (w = 1): (−0.5/3, −0.5/3, −0.5/3) = (−0.166667, −0.166667, −0.166667)
    #   OC-GRPO:            (−0.5/3, −0.125/3, −0.005/3) = (−0.166667, −0.041667, −0.001667)
    logp = torch.tensor([[-1.2, -0.3, -2.0]], requires_grad=True)
    mask = torch.ones(1, 3)
    norm = Normalizer(num_tokens=3.0, num_sequences=1.0, max_len=3.0)
    w = torch.tensor([[1.0, 0.25, 0.01]])

    def grad(weights):
        logp.grad = None
        per_token, _ = clipped_surrogate(logp, logp.detach(), torch.tensor([0.5]).unsqueeze(1) * weights, 0.2, 0.2, 3.0)
        aggregate(per_token, mask, "token-mean", norm).backward()
        return logp.grad.clone()

    plain = grad(torch.ones(1, 3))
    assert torch.allclose(plain, torch.tensor([[-0.5 / 3] * 3]))
    assert torch.allclose(grad(w), torch.tensor([[-0.5 / 3, -0.125 / 3, -0.005 / 3]]))
    assert torch.allclose(grad(w), w * plain)


def test_module_loss_gradient_scales_each_tokens_grpo_gradient_by_its_weight():
    """Through the module's Updater.micro_batch_loss: ∇θ(weighted row) = Σ_t w_t ∇θ(GRPO loss of token t alone)."""
    module = _tiny_module(epsilon_low=0.2, epsilon_high=0.2)
    batch = _guided_batch(module)
    t = collate_rollouts(batch, torch.tensor([0]), module._pad_id)  # the guided row, plain prompt x, A = 0.7
    norm = Normalizer(num_tokens=5.0, num_sequences=1.0, max_len=6.0)
    params = [p for p in module.policy.parameters() if p.requires_grad]

    def grad(weights):
        t.token_weights = weights
        module.policy.zero_grad(set_to_none=True)
        loss, _ = module.updater.micro_batch_loss(t, norm)
        loss.backward()
        return torch.cat([p.grad.flatten() for p in params])

    w = torch.tensor([[0.9, 0.01, 1.0, 0.3, 0.55]])
    weighted = grad(w)
    per_token = [grad(torch.eye(5)[j : j + 1]) for j in range(5)]  # GRPO gradient of token j alone (w = e_j)
    expected = sum(w[0, j] * per_token[j] for j in range(5))
    assert torch.allclose(weighted, expected, atol=1e-6, rtol=1e-4)
    assert torch.allclose(grad(torch.ones(1, 5)), sum(per_token), atol=1e-6, rtol=1e-4)  # w = 1: plain GRPO


# --------------------------------------------------------------------------- real tiny fits

# A random policy gets about a third of its groups all wrong under this reward; a fresh group is
# often not, so the cascade solves groups and sometimes climbs to 1.0 without success.
FIT = [
    "--model.rewards+=lit_rlvr.rewards.CallableReward",
    "--model.rewards.fn=tests.helpers:quarter_reward",
    "--model.accuracy_reward=quarter_reward",
    "--data.source.init_args.train_size=24",
    "--trainer.limit_val_batches=0",
    "--model.rollout.max_new_tokens=4",
    "--trainer.callbacks+=tests.fit_callbacks.DumpSelectorState",
]


def _fit(workdir, steps, ckpt=None):
    workdir.mkdir(parents=True, exist_ok=True)
    os.chdir(workdir)
    args = ["fit", "--config", TINY, "--config", OC, f"--trainer.max_steps={steps}", *FIT]
    main(args + (["--ckpt_path", ckpt] if ckpt else []))
    return torch.load(workdir / "selector_dump" / "rank0.pt", weights_only=False)


@pytest.mark.integration
def test_tiny_fit_guides_counts_and_resumes_with_the_same_decisions(tmp_path):
    straight = _fit(tmp_path / "straight", 4)
    rows = step_rows(str(tmp_path / "straight" / "runs" / "tiny"))
    assert len(rows) == 4
    guided = sum(float(r["oc/guided_groups"]) for r in rows)
    assert guided > 0, "no group was guided in 4 steps"
    for r in rows:  # 4 groups × 4 rollouts, plus 4 per guided try
        assert float(r["rollouts/generated"]) >= 16.0
        assert float(r["oc/guided_groups"]) + float(r["oc/unsolved_after_guidance"]) + float(r["oc/no_solution_groups"]) == float(r["oc/all_wrong_groups"])
    assert any(float(r["rollouts/generated"]) > 16.0 for r in rows)
    weighted = [float(r["oc/is_weight_min"]) for r in rows if not math.isnan(float(r["oc/is_weight_min"]))]
    assert weighted and all(0.01 - 1e-6 <= w <= 1.0 for w in weighted)
    state = straight["states"]["OCGRPO"]
    assert int(state["totals"]["guided"]) == guided

    _fit(tmp_path / "first", 2)
    (ckpt,) = glob.glob(str(tmp_path / "first" / "**" / "last.ckpt"), recursive=True)
    resumed = _fit(tmp_path / "resumed", 4, ckpt=ckpt)
    assert_same(straight["states"], resumed["states"])  # per-prompt guidance table, fractions, totals
    again = step_rows(str(tmp_path / "resumed" / "runs" / "tiny"))
    for key in ("oc/guided_groups", "oc/mean_fraction", "rollouts/generated"):
        assert [r[key] for r in again] == [r[key] for r in rows[2:]], key


@pytest.mark.integration
def test_two_ddp_ranks_make_and_record_the_same_guidance_decisions(tmp_path):
    env = {**os.environ, "PYTHONPATH": str(ROOT), "OMP_NUM_THREADS": "1"}
    cmd = [sys.executable, "-m", "lit_rlvr.run.cli", "fit", "--config", TINY, "--config", OC,
           "--trainer.strategy=ddp", "--trainer.devices=2", "--trainer.max_steps=3", *FIT]
    done = subprocess.run(cmd, cwd=tmp_path, env=env, capture_output=True, text=True, timeout=600)
    assert done.returncode == 0, done.stderr[-4000:]
    rank0 = torch.load(tmp_path / "selector_dump" / "rank0.pt", weights_only=False)
    rank1 = torch.load(tmp_path / "selector_dump" / "rank1.pt", weights_only=False)
    assert_same(rank0["states"], rank1["states"])
    assert int(rank0["states"]["OCGRPO"]["totals"]["all_wrong"]) > 0
