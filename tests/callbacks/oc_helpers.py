"""A probe the OC-GRPO-Fixed fits add by class path (``tests.callbacks.oc_helpers.FixedProbe``); their reward,
``quarter_reward``, is in ``tests/helpers.py`` (reward modules stay free of torch)."""

import os as _os

import torch as _torch

from lit_rlvr.selection import TokenWeighter as _TokenWeighter


class FixedProbe(_TokenWeighter):
    """Listed after OCGRPOFixed: at stage 6 of every step, what this rank trains each guided group on.

    Per step: this rank's pool ids, and per guided group (pool id, rows, whether the loss prompt of the
    entry is the plain prompt x and each row records x̃, its fraction, OCGRPOFixed's weights and weights
    recomputed here by hand: clamp(exp(log π(y|x) − log π(y|x̃)), 0.01, 1) from unpadded one-row forwards).
    At the end, this rank's policy weights. Saved to ``<dir>/fixed_probe_rank<r>.pt``. Returns the weights
    it was given: it changes nothing.
    """

    def __init__(self, out_dir: str = "selector_dump") -> None:
        self.out_dir = out_dir
        self.steps: dict[int, dict] = {}

    def state_dict(self):
        return {}

    @staticmethod
    def _logprobs(pl_module, prompt: list[int], completion: list[int]) -> _torch.Tensor:
        ids = _torch.tensor([list(prompt) + list(completion)])
        logits = pl_module.policy(input_ids=ids, use_cache=False).logits[0].float() / pl_module.rollout_settings.temperature
        logp = _torch.log_softmax(logits[len(prompt) - 1 : -1], dim=-1)  # position P+j−1 predicts completion token j
        return logp.gather(1, _torch.tensor(completion)[:, None])[:, 0]

    @_torch.no_grad()
    def token_weights(self, trainer, pl_module, batch):
        from lit_rlvr.callbacks.oc_fixed import guided_info

        was_training = pl_module.policy.training
        pl_module.policy.eval()
        groups = []
        try:
            for p, rows in sorted(batch.group_indices().items()):
                info = guided_info(batch.pool.metadata[p])
                if info is None:
                    continue
                fraction, plain = info
                x, x_guided = pl_module.render_prompt(plain), pl_module.render_prompt(batch.pool.messages[p])
                rows = rows.tolist()
                by_hand = [
                    _torch.exp(self._logprobs(pl_module, x, batch.completions[r].token_ids)
                               - self._logprobs(pl_module, x_guided, batch.completions[r].token_ids)).clamp(0.01, 1.0)
                    for r in rows
                ]
                groups.append({
                    "id": int(batch.pool.ids[p]), "rows": len(rows), "fraction": fraction,
                    "loss_prompt_is_plain": batch.prompt_token_ids[p] == x and x != x_guided,
                    "rows_record_guided": all(batch.generated_from[r] == x_guided for r in rows),
                    "weights": [batch.token_weights[r].clone() for r in rows], "by_hand": by_hand,
                })
        finally:
            pl_module.policy.train(was_training)
        unguided = [batch.token_weights[r] for r in range(len(batch)) if batch.generated_from[r] is None]
        self.steps[int(pl_module.steps_done)] = {
            "ids": sorted(int(batch.pool.ids[p]) for p in batch.group_indices()), "guided": groups,
            "unguided_weights_one": all(bool((w == 1.0).all()) for w in unguided), "rows": len(batch),
        }
        return batch.token_weights

    def on_train_end(self, trainer, pl_module) -> None:
        weights = {k: v.detach().cpu().clone() for k, v in pl_module.policy.state_dict().items()}
        _os.makedirs(self.out_dir, exist_ok=True)
        _torch.save({"steps": self.steps, "weights": weights}, _os.path.join(self.out_dir, f"fixed_probe_rank{trainer.global_rank}.pt"))
