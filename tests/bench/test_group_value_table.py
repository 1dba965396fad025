"""benchmarks/group_value_table.py: a re-probed step keeps its last rows, and v is the ratio of the mean projections."""

import pytest

from tests.benchmark_scripts import load_benchmark

HEAD = "step,set,unit,prompt_id,informative,norm,cos_step,cos_rest,cos_heldout,proj_heldout\n"


def _probe(step, trained, candidates):
    rows = [f"{step},trained,{i},{i},1,1.0,0.5,0.1,0.2,{p}\n" for i, p in enumerate(trained)]
    rows += [f"{step},candidate,{i},{9 + i},1,2.0,0.1,0.1,0.1,{p}\n" for i, p in enumerate(candidates)]
    return "".join(rows) + f"{step},step,-1,-1,1,1.0,,,0.3,0.1\n{step},heldout,-1,-1,1,1.0,,,,\n"


def test_a_reprobed_step_keeps_its_last_rows_and_v_is_the_ratio_of_mean_projections(tmp_path):
    mod = load_benchmark("group_value_table")
    path = tmp_path / "x.group_value.csv"
    # step 5 probed twice (a resume): the first probe's rows (projection 9) are dropped
    path.write_text(HEAD + _probe(0, [0.2, 0.4], [0.3]) + _probe(5, [9.0], [9.0]) + _probe(5, [0.1], [0.1, 0.3]))
    rows = mod.read_rows(path)
    assert [r["proj_heldout"] for r in rows if r["step"] == "5" and r["set"] != "step" and r["proj_heldout"]] == \
        ["0.1", "0.1", "0.3"]
    cell = mod.summarize(rows, candidate_prompts=4)
    assert cell["trained"]["groups"] == 3 and cell["candidate"]["groups"] == 3
    assert cell["ratio_proj_heldout"][0] == pytest.approx((0.7 / 3) / (0.7 / 3))
    assert cell["ratio_norm"][0] == pytest.approx(0.5)
    assert cell["candidate"]["informative_share"] == pytest.approx(3 / 8)
