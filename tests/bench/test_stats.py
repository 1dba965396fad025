"""The statistics and formatting shared by the benchmark reports."""

import json
import math

import numpy as np
import pytest

from lit_rlvr.bench.stats import fmt_count, fmt_target, jsonable, mean_std, paired_ratios, pm, stat


def test_stat_drops_nans_and_has_zero_std_for_one_value():
    assert stat([1.0, math.nan, 3.0]) == {"mean": 2.0, "std": pytest.approx(math.sqrt(2)), "n": 2}
    assert stat([5.0]) == {"mean": 5.0, "std": 0.0, "n": 1}
    mean, std, n = mean_std([math.nan])
    assert math.isnan(mean) and math.isnan(std) and n == 0


def test_paired_ratios_use_only_the_seeds_both_have():
    a = {"0": 100.0, "1": 300.0, "2": 50.0, "3": math.nan}
    ref = {"0": 200.0, "1": 100.0, "4": 1.0, "3": 10.0}
    assert paired_ratios(a, ref) == [0.5, 3.0]  # seed 2 and 4 unpaired, seed 3 NaN: left out
    assert paired_ratios({"0": 10.0}, {"0": 0.0, "1": 20.0}) == [1.0]  # no usable pair: ratio of the means (10 / 10)
    assert paired_ratios({"0": 10.0}, {"1": 20.0}) == [0.5]
    assert paired_ratios({"0": math.nan}, {"1": 20.0}) == []


def test_pm_prints_the_spread_only_over_several_values():
    assert pm(stat([0.5]), ".2f") == "0.50"
    assert pm(stat([0.5, 0.7]), ".2f") == "0.60 ± 0.14"
    assert pm(stat([1000.0, 3000.0]), "", count=True) == "2,000 ± 1,414"
    assert pm(stat([20_000.0]), "", count=True) == "20k"
    assert pm(None, ".2f") == "–" and pm(stat([math.nan]), ".2f") == "–"


def test_counts_below_10k_are_shown_in_full_and_targets_keep_a_third_decimal():
    assert [fmt_count(x) for x in (362.4, 1370.0, 9999.0, 142_000.0, 2.5e6, float("nan"))] == [
        "362", "1,370", "9,999", "142k", "2.50M", "–"]
    assert [fmt_target(t) for t in (0.7, 0.75, 0.281, 0.211)] == ["0.70", "0.75", "0.281", "0.211"]


def test_jsonable_turns_nan_into_null_and_numpy_into_python():
    x = jsonable({1: (np.float32(0.5), math.nan), "n": np.int64(3), "s": [np.nan]})
    assert x == {"1": [0.5, None], "n": 3, "s": [None]}
    assert type(x["n"]) is int
    json.dumps(x, allow_nan=False)
