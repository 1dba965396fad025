"""A tiny simulator setting shared by the sim tests (a few hundred prompts, B = 8, a few steps)."""

from lit_rlvr.bench.sim import SimConfig

B, G = 8, 8
TINY = SimConfig(num_prompts=400, num_val=100, batch_size=B, steps=6, max_rollouts=0, eta=0.05)


def per_step(result, name):
    return result.column(name)[1:]  # row 0 is the evaluation before training
