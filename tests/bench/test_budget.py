"""RolloutBudget ends a real fit once the rollouts generated reach the budget."""

from lit_rlvr.bench.budget import RolloutBudget


def test_fit_stops_at_the_rollout_budget():
    import lightning.pytorch as pl

    from lit_rlvr.data import PromptDataModule, ReasoningGymSource
    from lit_rlvr.module import GRPOModule, RolloutSettings
    from lit_rlvr.policy import PolicyConfig

    module = GRPOModule(policy=PolicyConfig(name_or_path="tiny"), rollout=RolloutSettings(num_generations=4, max_new_tokens=4),
                        checkpoint_every_n_steps=None)
    data = PromptDataModule(ReasoningGymSource(train_size=16, val_size=4), batch_size=2)
    trainer = pl.Trainer(max_steps=50, logger=False, enable_checkpointing=False, enable_progress_bar=False,
                         limit_val_batches=0, callbacks=[RolloutBudget(budget=20)])
    trainer.fit(module, data)
    # 8 rollouts per step: the step that reaches 20 is the third (24 generated), then it stops.
    assert module.steps_done == 3 and module.totals.rollouts_generated == 24
