"""Probe how often the untrained quick-start model solves a basic_arithmetic setting (issue 16: pick a
task "too hard" for it). Samples N prompts x G completions at temperature 1, scores with the last number
(the quick-start's reward), prints the sampled accuracy, the share of all-wrong groups, and the share of
completions that hit the token cap.

    python scripts/probe_task.py --digits 2 --ops + --n 32 --g 4 --max-new 24
"""
import argparse, json, re
import torch
import reasoning_gym
from lit_rlvr.policy import PolicyConfig, load_policy

p = argparse.ArgumentParser()
p.add_argument("--digits", type=int, default=2)
p.add_argument("--ops", nargs="+", default=["+"])
p.add_argument("--n", type=int, default=32)
p.add_argument("--g", type=int, default=4)
p.add_argument("--max-new", type=int, default=24)
a = p.parse_args()
torch.manual_seed(0)
model, tok = load_policy(PolicyConfig(name_or_path="smollm2-135m-instruct"))
model.eval()
ds = reasoning_gym.create_dataset("basic_arithmetic", size=a.n, seed=123, min_terms=2, max_terms=2, min_digits=a.digits,
                                  max_digits=a.digits, operators=a.ops, allow_parentheses=False, allow_negation=False)
tok.padding_side = "left"
texts = [tok.apply_chat_template([{"role": "system", "content": "Answer with a single number."},
                                  {"role": "user", "content": e["question"]}], tokenize=False, add_generation_prompt=True) for e in ds]
enc = tok(texts, return_tensors="pt", padding=True)
with torch.no_grad():
    out = model.generate(**enc, do_sample=True, temperature=1.0, top_k=0, max_new_tokens=a.max_new, num_return_sequences=a.g)
gen = out[:, enc.input_ids.shape[1]:]
correct, capped = [], 0
for i, row in enumerate(gen):
    text = tok.decode(row, skip_special_tokens=True)
    capped += int(tok.eos_token_id not in row.tolist())
    nums = re.findall(r"-?\d+(?:\.\d+)?", text)
    e = ds[i // a.g]
    correct.append(float(bool(nums) and nums[-1] == str(e["answer"])))
c = torch.tensor(correct).view(a.n, a.g)
print(json.dumps({"digits": a.digits, "ops": a.ops, "max_new": a.max_new, "accuracy": c.mean().item(),
                  "all_wrong_groups": (c.sum(1) == 0).float().mean().item(), "capped": capped / len(correct),
                  "example": tok.decode(gen[0], skip_special_tokens=True)}))
