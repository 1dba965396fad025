"""Which task + system prompt draws 128-256-token answers from SmolLM2-135M-Instruct, and how often they are right."""
import sys, json, statistics, torch
torch.set_num_threads(1)
from lit_rlvr.data import PromptDataModule, ReasoningGymSource
from lit_rlvr.policy import PolicyConfig, load_policy
from lit_rlvr.prompts import render_prompts
from lit_rlvr.rollout import GenerationRequest, HFEngine, SamplingConfig
from lit_rlvr.rewards import ReasoningGymReward
model, tok = load_policy(PolicyConfig(name_or_path="smollm2-135m-instruct"))
engine = HFEngine(model, tok)
reward = ReasoningGymReward(extraction="last_number")
variants = json.loads(open(sys.argv[1]).read())
for v in variants:
    source = ReasoningGymSource(tasks=v["task"], task_config=v.get("cfg", {}), train_size=200, val_size=8)
    dm = PromptDataModule(source, batch_size=4, val_batch_size=8, system_prompt=v["system"], prompt_template="{question}")
    dm.setup()
    pool = dm.pool(0)
    prompts = render_prompts(tok, pool.messages)
    out = engine.generate([GenerationRequest(p, 8) for p in prompts], SamplingConfig(temperature=0.8, max_new_tokens=256, seed=0))
    lens = [len(c.token_ids) for g in out for c in g]
    trunc = sum(c.finish_reason == "length" for g in out for c in g)
    scores = [reward.score(c.text, pool.answers[i], pool.metadata[i]) for i, g in enumerate(out) for c in g]
    print(v["name"], "accuracy", round(statistics.mean(scores), 3), "mean tokens", round(statistics.mean(lens)), "median", statistics.median(lens), "truncated", trunc, "/", len(lens), flush=True)
    print("  sample:", repr(out[0][0].text[:400]), flush=True)
