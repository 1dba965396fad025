"""benchmarks/batch_choice.py: the setting of each step read from a cell's group records."""

from tests.benchmark_scripts import load_benchmark


def _write_groups(path, steps):
    """groups.csv with one row per prompt group: ``steps`` lists (prompts, G) per step."""
    rows = ["step,epoch,prompt_id,n,correct,reward_min,reward_max"]
    for step, (prompts, g) in enumerate(steps):
        rows += [f"{step},0,{step * 10 + i},{g},1,0.0,1.0" for i in range(prompts)]
    path.write_text("\n".join(rows) + "\n")


def test_a_cell_whose_group_size_changed_reads_as_prompts_and_g_per_step(tmp_path):
    script = load_benchmark("batch_choice")
    _write_groups(tmp_path / "ab_seed0.groups.csv", [(2, 32)] * 2 + [(2, 16)] * 3 + [(3, 8)])
    steps = script.settings(tmp_path, "ab", "0")
    assert steps == [(2, 32), (2, 32), (2, 16), (2, 16), (2, 16), (3, 8)]
    assert script.batches(tmp_path, "ab", "0") == [2, 2, 2, 2, 2, 3]
    assert script.run_lengths(steps) == "2·32×2 2·16×3 3·8"
    assert script.run_lengths([8, 8, 5, 2, 2]) == "8×2 5 2×2"  # prompts only, as the older tables show them
    assert script.settings(tmp_path, "missing", "0") == []
