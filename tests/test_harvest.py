"""G2D harvest: pair rules on fixed candidate sets, the writer's dataset and summary, the no-pair message."""

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
import torch

from lit_rlvr.run.cli import main
from lit_rlvr.g2d import HarvestRecord, NoMixedPrompts, extreme_pairs, random_pairs
from lit_rlvr.g2d.writer import harvest_summary, merge_shards, pair_rows

ROOT = Path(__file__).resolve().parents[1]
HARVEST = [
    "predict", "--config", str(ROOT / "configs" / "g2d" / "harvest.yaml"),
    "--config", str(ROOT / "tests" / "configs" / "g2d_tiny" / "harvest.yaml"),
    "--model.policy.name_or_path=tiny", "--trainer.default_root_dir=harvest",
]


def _gen(seed: int = 0) -> torch.Generator:
    return torch.Generator().manual_seed(seed)


@pytest.mark.parametrize("rule", [random_pairs, extreme_pairs])
def test_all_correct_and_all_wrong_prompts_give_no_pair(rule):
    rewards = torch.tensor([1.0, 1.0, 1.0, 1.0])
    assert rule(torch.ones(4, dtype=torch.bool), rewards, 3, _gen()) == []
    assert rule(torch.zeros(4, dtype=torch.bool), torch.zeros(4), 3, _gen()) == []


@pytest.mark.parametrize("rule", [random_pairs, extreme_pairs])
def test_a_mixed_prompt_pairs_correct_over_incorrect_each_candidate_once(rule):
    correct = torch.tensor([True, False, True, False, False, True, False, False])  # 3 right, 5 wrong
    rewards = correct.float()
    one = rule(correct, rewards, 1, _gen())
    assert len(one) == 1  # the default: one pair per mixed prompt
    many = rule(correct, rewards, 8, _gen())
    assert len(many) == 3  # capped by min(#correct, #wrong): no candidate is used twice
    chosen, rejected = zip(*many)
    assert all(correct[c] for c in chosen) and not any(correct[r] for r in rejected)
    assert len(set(chosen)) == 3 and len(set(rejected)) == 3


def test_random_pairs_are_reproducible_from_the_generator_seed():
    correct = torch.tensor([True, True, True, False, False, False])
    a = random_pairs(correct, correct.float(), 2, _gen(7))
    assert a == random_pairs(correct, correct.float(), 2, _gen(7))


def test_extreme_pairs_take_the_widest_reward_gap():
    # correct 0, 2, 3 with total rewards 1.1, 1.3, 1.0 (a format bonus on top of accuracy);
    # wrong 1, 4 with 0.2, 0.0 → best correct (2, reward 1.3) vs worst wrong (4, reward 0.0), then (0, 1)
    correct = torch.tensor([True, False, True, True, False])
    rewards = torch.tensor([1.1, 0.2, 1.3, 1.0, 0.0])
    assert extreme_pairs(correct, rewards, 2, _gen()) == [(2, 4), (0, 1)]


def _record(prompt_id: int, correct: int, n: int = 4, pairs: int = 0) -> HarvestRecord:
    pair = {"chosen": "4", "rejected": "5", "chosen_reward": 1.0, "rejected_reward": 0.0,
            "chosen_truncated": False, "rejected_truncated": True}
    return HarvestRecord(prompt_id=prompt_id, prompt=f"<user>q{prompt_id}<assistant>", answer="4",
                         prompt_messages=[{"role": "user", "content": f"q{prompt_id}"}],
                         num_candidates=n, num_correct=correct, pairs=[pair] * pairs, generated_tokens=3 * n)


def test_shards_merge_without_duplicates_and_the_dataset_loads(tmp_path):
    import dataclasses

    import datasets

    # rank 1 repeats prompt 0, as Lightning's distributed sampler pads the last batch
    shards = {0: [_record(0, 2, pairs=1), _record(2, 4)], 1: [_record(1, 0), _record(3, 1, pairs=1), _record(0, 2, pairs=1)]}
    paths = []
    for rank, records in shards.items():
        path = tmp_path / f"rank{rank}.jsonl"
        path.write_text("".join(json.dumps(dataclasses.asdict(r)) + "\n" for r in records))
        paths.append(path)
    records = merge_shards(paths)
    assert [r.prompt_id for r in records] == [0, 1, 2, 3]
    summary = harvest_summary(records)
    assert (summary["prompts"], summary["mixed_prompts"], summary["pairs"]) == (4, 2, 2)
    assert (summary["all_correct"], summary["all_wrong"]) == (1, 1)
    assert summary["success_rate_histogram"] == {"0/4": 1, "1/4": 1, "2/4": 1, "4/4": 1}
    out = tmp_path / "pairs.jsonl"
    out.write_text("".join(json.dumps(row) + "\n" for row in pair_rows(records)))
    ds = datasets.load_dataset("json", data_files=str(out), split="train")
    assert ds.num_rows == 2
    assert {"prompt", "chosen", "rejected", "prompt_id", "chosen_reward", "rejected_reward", "success_rate"} <= set(ds.column_names)
    assert ds["prompt_id"] == [0, 3] and ds["success_rate"] == [0.5, 0.25]


@pytest.mark.integration
def test_predict_writes_a_dataset_that_load_dataset_reads():
    import datasets

    main(HARVEST + ["--trainer.callbacks.formats=[jsonl, parquet]"])
    summary = json.loads(Path("harvest/summary.json").read_text())
    assert summary["prompts"] == 8 and summary["candidates"] == 32
    assert summary["pairs"] == summary["mixed_prompts"] > 0  # one pair per mixed prompt
    assert sum(summary["success_rate_histogram"].values()) == 8
    for kind, path in [("json", "harvest/pairs.jsonl"), ("parquet", "harvest/pairs.parquet")]:
        ds = datasets.load_dataset(kind, data_files=path, split="train")
        assert ds.num_rows == summary["pairs"]
        row = ds[0]
        assert row["prompt"].endswith("<|im_start|>assistant\n")  # the chat-templated text the policy saw
        assert row["chosen_reward"] > row["rejected_reward"] and 0 < row["success_rate"] < 1
    compute = json.loads(Path("harvest/compute.json").read_text())
    assert compute["generated_tokens"] == summary["generated_tokens"] > 0
    assert not Path("harvest/.shards").exists()


def test_a_harvest_without_a_mixed_prompt_says_so_and_writes_no_dataset():
    with pytest.raises(NoMixedPrompts, match="hotter temperature.*K, the warm-up length"):
        main(HARVEST + ["--model.rewards.fn=tests.g2d_helpers:always_wrong"])
    assert not Path("harvest/pairs.jsonl").exists()
    assert json.loads(Path("harvest/summary.json").read_text())["all_wrong"] == 8


@pytest.mark.slow  # two processes on CPU: about a minute on a shared 2-core machine (pytest -m slow)
def test_two_ddp_ranks_split_the_prompts_and_the_writer_merges_them(tmp_path):
    """7 prompts on 2 gloo ranks: the distributed sampler repeats one; the dataset holds each prompt once."""
    env = {**os.environ, "PYTHONPATH": str(ROOT), "OMP_NUM_THREADS": "1"}
    cmd = [sys.executable, "-m", "lit_rlvr.run.cli", *HARVEST, "--trainer.strategy=ddp", "--trainer.devices=2",
           "--data.source.init_args.train_size=7"]
    done = subprocess.run(cmd, cwd=tmp_path, env=env, capture_output=True, text=True, timeout=600)
    assert done.returncode == 0, done.stderr[-4000:]
    summary = json.loads((tmp_path / "harvest" / "summary.json").read_text())
    assert summary["prompts"] == 7
    ids = [json.loads(line)["prompt_id"] for line in (tmp_path / "harvest" / "pairs.jsonl").read_text().splitlines()]
    assert ids == sorted(set(ids)) and len(ids) == summary["pairs"] > 0
