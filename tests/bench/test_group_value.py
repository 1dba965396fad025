"""GroupValueProbe: each group's gradient read at the step's own weights, and a probed fit that trains exactly as an
unprobed one (the arithmetic: tests/critical_batch/test_group_value.py)."""

import csv

import lightning.pytorch as pl
import pytest
import torch


def _fit(tmp_path, probe: bool, steps: int = 3):
    from lit_rlvr.bench.group_value import GroupValueProbe
    from lit_rlvr.data import PromptDataModule, ReasoningGymSource
    from lit_rlvr.module import GRPOModule, LossSettings, OptimizerSettings, RolloutSettings
    from lit_rlvr.policy import LoraSettings, PolicyConfig
    from lit_rlvr.rewards import CallableReward
    from lit_rlvr.run.loggers import CSVLogger

    pl.seed_everything(0, verbose=False)
    module = GRPOModule(
        policy=PolicyConfig(name_or_path="tiny", lora=LoraSettings(r=4, alpha=8)),
        rollout=RolloutSettings(num_generations=4, max_new_tokens=6),
        loss=LossSettings(micro_batch_size=5),
        optimizer=OptimizerSettings(lr=1e-3),
        checkpoint_every_n_steps=None,
        rewards=[CallableReward(fn="tests.helpers:mostly_mixed_reward")],
    )
    data = PromptDataModule(ReasoningGymSource(train_size=32, val_size=4), batch_size=4)
    logger = CSVLogger(str(tmp_path / f"probe{probe}"), name="csv")
    callbacks = [GroupValueProbe(every=2, candidate_prompts=4, heldout_prompts=3)] if probe else []
    trainer = pl.Trainer(max_steps=steps, logger=logger, enable_checkpointing=False, enable_progress_bar=False,
                         enable_model_summary=False, limit_val_batches=0, log_every_n_steps=1, callbacks=callbacks)
    trainer.fit(module, data)
    logger.save()
    params = torch.cat([p.detach().flatten() for p in module.policy.parameters() if p.requires_grad])
    with open(f"{logger.log_dir}/metrics.csv") as f:
        metrics = [{k: v for k, v in r.items() if not k.startswith("time/")} for r in csv.DictReader(f) if r.get("train/loss")]
    probed = []
    if probe:
        with open(f"{logger.log_dir}/group_value.csv") as f:
            probed = list(csv.DictReader(f))
    return params, metrics, probed, module


@pytest.mark.integration
def test_a_probed_fit_trains_exactly_as_without_the_probe_and_records_every_set(tmp_path):
    on, metrics_on, rows, _ = _fit(tmp_path, True)
    off, metrics_off, _, _ = _fit(tmp_path, False)
    assert torch.equal(on, off)  # weights, .grad, optimizer, data order and RNG untouched
    assert metrics_on == metrics_off
    assert sorted({int(r["step"]) for r in rows}) == [0, 2]  # every=2 over 3 steps
    for step in (0, 2):
        sets = [r["set"] for r in rows if int(r["step"]) == step]
        assert sets.count("step") == 1 and sets.count("heldout") == 1 and "trained" in sets
    trained = [r for r in rows if r["set"] == "trained" and float(r["informative"]) == 1]
    assert trained and all(float(r["norm"]) > 0 and -1 <= float(r["cos_step"]) <= 1 for r in trained)
    assert all(int(r["prompt_id"]) >= 0 for r in rows if r["set"] in ("trained", "candidate"))
    heldout = [r for r in rows if r["set"] == "heldout"]
    if any(float(r["norm"]) > 0 for r in heldout):  # a held-out batch with an informative group: cosines are measured
        assert any(r["cos_heldout"] not in ("", "nan") for r in rows if r["set"] == "trained")


def test_a_candidate_groups_gradient_is_its_own_backward(tmp_path):
    """The probe's per-group gradients (hooks under autograd.grad) equal a plain backward over that group's rows."""
    from lit_rlvr.advantages import grpo_advantages
    from lit_rlvr.bench.group_value import GroupValueProbe
    from lit_rlvr.collate import collate_rollouts
    from lit_rlvr.data import PromptDataModule, ReasoningGymSource
    from lit_rlvr.losses import Normalizer
    from lit_rlvr.module import GRPOModule, LossSettings, RolloutSettings
    from lit_rlvr.policy import LoraSettings, PolicyConfig
    from lit_rlvr.rewards import CallableReward
    from lit_rlvr.selection import FixedGroupAllocator

    pl.seed_everything(0, verbose=False)
    module = GRPOModule(
        policy=PolicyConfig(name_or_path="tiny", lora=LoraSettings(r=4, alpha=8)),
        rollout=RolloutSettings(num_generations=4, max_new_tokens=6), loss=LossSettings(micro_batch_size=3),
        rewards=[CallableReward(fn="tests.helpers:mostly_mixed_reward")], checkpoint_every_n_steps=None,
    )
    module.configure_model()
    data = PromptDataModule(ReasoningGymSource(train_size=16, val_size=4), batch_size=4)
    data.setup("fit")
    probe = GroupValueProbe()
    probe._host = module
    pool = data.draw(4, key=123)
    normalizer = Normalizer(num_tokens=17.0, num_sequences=8.0, max_len=6.0)
    ids, stacks = probe._pool_gradients(pool, step=0, normalizer=normalizer)
    assert ids and all(p.grad is None for p in module.policy.parameters())  # .grad untouched
    # the same rollouts again (the probe's seeds), one group at a time through an ordinary backward
    batch, _ = module.rollout_loop.run(pool, FixedGroupAllocator())
    batch.advantages = grpo_advantages(batch.rewards, batch.prompt_index, batch.keep)
    from lit_rlvr.critical_batch.group_gradients import GroupGradients

    recorder = GroupGradients().attach(module.policy)
    params = recorder.params  # the order of the probe's stacks
    recorder.detach()
    for k, unit in enumerate(ids):
        rows = torch.nonzero((batch.prompt_index == unit) & (batch.advantages != 0)).flatten()
        tensors = collate_rollouts(batch, rows, module._pad_id)
        module.policy.zero_grad(set_to_none=True)
        loss, _ = module.updater.micro_batch_loss(tensors, normalizer)
        loss.backward()
        expected = torch.cat([(p.grad if p.grad is not None else torch.zeros_like(p)).flatten() for p in params])
        got = torch.cat([s[k] for s in stacks])
        torch.testing.assert_close(got, expected, rtol=1e-4, atol=1e-7)
    module.policy.zero_grad(set_to_none=True)
