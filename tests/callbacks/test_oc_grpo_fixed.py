"""OCGRPOFixed: a harvested guided row trains exactly as the Adaptive variant trains a group it replaced."""

from __future__ import annotations

import glob
import math
import os
from pathlib import Path

import pytest
import torch

from lit_rlvr.callbacks import OCGRPO, OCGRPOFixed
from lit_rlvr.callbacks.oc_guidance import guided_messages
from lit_rlvr.run.cli import main
from lit_rlvr.collate import collate_rollouts
from lit_rlvr.rollout.revise import apply_revision, revise
from lit_rlvr.types import Completion, GroupReplacement, PromptPool, Revision, RolloutBatch, RolloutStats

from tests.assertions import assert_same
from tests.callbacks.test_oc_grpo import _tiny_module
from tests.test_oc_fixed_harvest import run_echo_harvest
from tests.metrics_files import step_rows

ROOT = Path(__file__).resolve().parents[2]
TINY = str(ROOT / "configs" / "tiny.yaml")
FIXED = str(ROOT / "configs" / "methods" / "oc_grpo_fixed.yaml")

PLAIN = [{"role": "system", "content": "Answer with a single number."}, {"role": "user", "content": "What is 47 + 38?"}]
OTHER = [{"role": "system", "content": "Answer with a single number."}, {"role": "user", "content": "What is 12 + 9?"}]
FRACTION = 0.6
GUIDED = guided_messages(PLAIN, "47 + 38 = 8", FRACTION)


def _rows(module, seed=0):
    """Completions [4] (rows 0, 2 of prompt 0; rows 1, 3 of prompt 1), rewards and advantages."""
    g = torch.Generator().manual_seed(seed)
    vocab = module.policy.config.vocab_size
    comps = [Completion(torch.randint(5, vocab, (n,), generator=g).tolist(), [0.0] * n, "stop") for n in (5, 4, 3, 6)]
    return comps, torch.tensor([1.0, 0.0, 0.0, 1.0])


def _batch(pool, prompts, comps, rewards):
    return RolloutBatch(pool=pool, prompt_index=torch.tensor([0, 1, 0, 1]), prompt_token_ids=prompts, completions=list(comps),
                        rewards=rewards.clone(), round=torch.zeros(4, dtype=torch.long), keep=torch.ones(4, dtype=torch.bool),
                        reward_components={"parity_reward": rewards.clone()}, advantages=torch.tensor([0.7, -0.7, -0.7, 0.7]))


def fixed_batch(module, comps, rewards):
    """As the rollout stage leaves it for a harvested guided row: generated from its pool prompt x̃."""
    meta = {"oc_guided": {"fraction": FRACTION, "plain_messages": PLAIN, "source_id": 0}}
    pool = PromptPool(ids=[9, 1], messages=[GUIDED, OTHER], answers=["85", "21"], metadata=[meta, {}], batch_size=2)
    return _batch(pool, [module.render_prompt(GUIDED), module.render_prompt(OTHER)], comps, rewards)


def adaptive_batch(module, comps, rewards):
    """The Adaptive variant's batch after it replaced prompt x's group with the same rollouts generated from x̃."""
    pool = PromptPool(ids=[0, 1], messages=[PLAIN, OTHER], answers=["85", "21"], metadata=[{}, {}], batch_size=2)
    first = [Completion([7] * 2, [0.0] * 2, "stop") for _ in range(4)]  # the all-wrong originals it replaced
    batch = _batch(pool, [module.render_prompt(PLAIN), module.render_prompt(OTHER)], first, torch.zeros(4))
    rep = GroupReplacement(pool_index=0, completions=[comps[0], comps[2]], rewards=rewards[[0, 2]],
                           components={"parity_reward": rewards[[0, 2]]}, prompt_token_ids=module.render_prompt(GUIDED))
    apply_revision(batch, Revision(replacements=[rep]))
    batch.completions[1], batch.completions[3] = comps[1], comps[3]
    batch.rewards, batch.reward_components = rewards.clone(), {"parity_reward": rewards.clone()}
    return batch


def test_the_swap_and_weights_equal_the_adaptive_variants_on_the_same_rows():
    module = _tiny_module()
    comps, rewards = _rows(module)
    fixed = fixed_batch(module, comps, rewards)
    oc = OCGRPOFixed()
    revise(oc, None, module, fixed, RolloutStats())
    adaptive = adaptive_batch(module, comps, rewards)

    x, x_guided = module.render_prompt(PLAIN), module.render_prompt(GUIDED)
    assert x != x_guided
    assert fixed.prompt_token_ids[0] == x  # the loss prompt is the plain one
    assert fixed.generated_from == [x_guided, None, x_guided, None] == adaptive.generated_from
    assert fixed.prompt_token_ids == adaptive.prompt_token_ids
    assert fixed.discarded_rollouts == 0 and [c.token_ids for c in fixed.completions] == [c.token_ids for c in comps]

    w_fixed, w_adaptive = oc.token_weights(None, module, fixed), OCGRPO().token_weights(None, module, adaptive)
    for a, b in zip(w_fixed, w_adaptive):
        assert torch.equal(a, b)
    assert w_fixed[1].tolist() == [1.0] * 4 and w_fixed[3].tolist() == [1.0] * 6  # unguided rows: exactly 1
    assert not torch.allclose(w_fixed[0], torch.ones(5))  # the weight is active on a guided row
    assert oc.last_metrics["oc/guided_groups"] == 1.0 and oc.last_metrics["oc/mean_fraction"] == pytest.approx(FRACTION)
    assert oc.last_metrics["oc/is_weight_mean"] == pytest.approx(float(torch.cat([w_fixed[0], w_fixed[2]]).mean()), rel=1e-6)

    # what the update sees: the plain prompt in [x | y], the same tensors and the same loss as the Adaptive path
    fixed.token_weights, adaptive.token_weights = w_fixed, w_adaptive
    rows = torch.arange(4)
    t_fixed, t_adaptive = collate_rollouts(fixed, rows, module._pad_id), collate_rollouts(adaptive, rows, module._pad_id)
    for name in ("input_ids", "attention_mask", "completion_mask", "token_weights", "advantages"):
        assert torch.equal(getattr(t_fixed, name), getattr(t_adaptive, name)), name
    prompt_len = t_fixed.input_ids.shape[1] - t_fixed.completion_len
    assert t_fixed.input_ids[0, prompt_len - len(x) : prompt_len].tolist() == x
    from lit_rlvr.losses import Normalizer

    norm = Normalizer(num_tokens=18.0, num_sequences=4.0, max_len=6.0)
    loss_fixed, _ = module.updater.micro_batch_loss(t_fixed, norm)
    loss_adaptive, _ = module.updater.micro_batch_loss(t_adaptive, norm)
    assert torch.equal(loss_fixed.detach(), loss_adaptive.detach())


def test_rows_of_ordinary_prompts_are_left_alone_and_bad_metadata_fails():
    module = _tiny_module()
    comps, rewards = _rows(module)
    pool = PromptPool(ids=[0, 1], messages=[PLAIN, OTHER], answers=["85", "21"], metadata=[{}, {}], batch_size=2)
    batch = _batch(pool, [module.render_prompt(PLAIN), module.render_prompt(OTHER)], comps, rewards)
    before = [list(p) for p in batch.prompt_token_ids]
    oc = OCGRPOFixed()
    revise(oc, None, module, batch, RolloutStats())
    assert batch.prompt_token_ids == before and batch.generated_from == [None] * 4
    assert all(w.tolist() == [1.0] * len(w) for w in oc.token_weights(None, module, batch))
    assert oc.last_metrics["oc/guided_groups"] == 0.0 and math.isnan(oc.last_metrics["oc/is_weight_mean"])
    batch.pool.metadata[0] = {"oc_guided": {"fraction": 1.5, "plain_messages": PLAIN}}
    with pytest.raises(ValueError, match="prompt id 0: metadata 'oc_guided'"):
        oc.revise(None, module, batch, RolloutStats())


# --------------------------------------------------------------------------- a tiny fit on a harvested file

REWARD = "--model.rewards=[{class_path: lit_rlvr.rewards.CallableReward, init_args: {fn: 'tests.helpers:quarter_reward'}}]"


def _fit(workdir, data_yaml, steps, ckpt=None):
    workdir.mkdir(parents=True, exist_ok=True)
    os.chdir(workdir)
    args = ["fit", "--config", TINY, "--config", FIXED, "--config", str(data_yaml), f"--trainer.max_steps={steps}", REWARD,
            "--model.accuracy_reward=quarter_reward", "--trainer.limit_val_batches=0", "--model.rollout.max_new_tokens=4",
            "--data.batch_size=4", "--trainer.callbacks+=tests.fit_callbacks.DumpSelectorState"]
    main(args + (["--ckpt_path", ckpt] if ckpt else []))
    return torch.load(workdir / "selector_dump" / "rank0.pt", weights_only=False)


@pytest.mark.integration  # an end-to-end fit, 19-56 s on 2 loaded cores: in the end-to-end suite
def test_tiny_fit_on_a_harvested_file_trains_the_guided_rows_and_resumes(tmp_path):
    summary, _, _ = run_echo_harvest(tmp_path / "harvest")  # 5 original rows + 3 guided ones
    data_yaml = tmp_path / "harvest" / "data.yaml"
    straight = _fit(tmp_path / "straight", data_yaml, 4)
    rows = step_rows(str(tmp_path / "straight" / "runs" / "tiny"))
    assert len(rows) == 4
    guided = sum(float(r["oc/guided_groups"]) for r in rows)
    assert guided > 0, "no guided row was drawn in 4 steps of 4 prompts out of 8"
    assert int(straight["states"]["OCGRPOFixed"]["totals"]["guided_groups"]) == guided
    weighted = [float(r["oc/is_weight_min"]) for r in rows if not math.isnan(float(r["oc/is_weight_min"]))]
    assert weighted and all(0.01 - 1e-6 <= w <= 1.0 for w in weighted)
    assert all(float(r["rollouts/generated"]) == 16.0 for r in rows)  # no regeneration: 4 prompts × 4

    _fit(tmp_path / "first", data_yaml, 2)
    (ckpt,) = glob.glob(str(tmp_path / "first" / "**" / "last.ckpt"), recursive=True)
    resumed = _fit(tmp_path / "resumed", data_yaml, 4, ckpt=ckpt)
    assert_same(straight["states"], resumed["states"])
    again = step_rows(str(tmp_path / "resumed" / "runs" / "tiny"))
    for key in ("oc/guided_groups", "oc/mean_fraction", "oc/is_weight_mean", "rollouts/generated"):
        assert [r[key] for r in again] == [r[key] for r in rows[2:]], key


def test_setup_warns_and_trains_as_grpo_without_harvested_rows(caplog):
    from types import SimpleNamespace

    from lit_rlvr.data import PromptRecord

    plain = SimpleNamespace(datamodule=SimpleNamespace(train_records=[PromptRecord(0, "q", "a")], source="src"))
    import logging

    logger = logging.getLogger("lit_rlvr.callbacks.oc_fixed")  # lit_rlvr's loggers may not propagate (console.py)
    logger.addHandler(caplog.handler)
    try:
        OCGRPOFixed().setup_selection(plain, None, [])
    finally:
        logger.removeHandler(caplog.handler)
    assert "trains as GRPO" in caplog.text
    templated = PromptRecord(1, "q", "a", {"oc_guided": {"fraction": 0.4, "plain_messages": PLAIN}})  # messages not served
    with pytest.raises(ValueError, match="messages_field: messages"):
        OCGRPOFixed().setup_selection(SimpleNamespace(datamodule=SimpleNamespace(train_records=[templated])), None, [])


def test_fsdp2_is_refused_with_what_to_do():
    from types import SimpleNamespace

    sharded = SimpleNamespace(lockstep=True)  # SelectionHost.lockstep: a forward is a collective (FSDP2)
    with pytest.raises(ValueError, match="FSDP2.*trainer.strategy=ddp"):
        OCGRPOFixed().setup_selection(SimpleNamespace(datamodule=None), sharded, [])
