"""benchmarks/plot_probe.py: the probe histograms as one bar chart, one bar per probe file."""

import json

import pytest

from tests.benchmark_scripts import load_benchmark


def _script():
    return load_benchmark("plot_probe")


def _probe(path, seed, g=8):
    hist = {f"{k}/{g}": (10 - k if k < 5 else 0) for k in range(g + 1)}
    path.write_text(json.dumps({"seed": seed, "g": g, "prompts_probed": sum(hist.values()), "histogram": hist,
                                "zero_variance_share": hist[f"0/{g}"] / sum(hist.values()), "mean_pass_rate": 0.1}))
    return str(path)


def test_writes_one_chart_for_several_seeds(tmp_path):
    out = tmp_path / "img" / "probe.png"
    _script().main([_probe(tmp_path / "a.json", 0), _probe(tmp_path / "b.json", 1), "--out", str(out)])
    assert out.is_file() and out.stat().st_size > 1000


def test_different_group_sizes_are_refused(tmp_path):
    with pytest.raises(SystemExit, match="different group sizes"):
        _script().main([_probe(tmp_path / "a.json", 0), _probe(tmp_path / "b.json", 1, g=4), "--out", str(tmp_path / "x.png")])
