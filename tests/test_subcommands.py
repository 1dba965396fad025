"""The user tools as ``lit-rlvr`` subcommands (``lit_rlvr.run.cli.SUBCOMMANDS``): one table, each tool answers
``--help`` under its own name, the run readers work on a committed run, the probe runs on a config, and
the tools that read fit configs (``probe``, ``oc-harvest``: ``lit_rlvr.run.fit_config``) read every shipped one.

The other real invocations: ``lit-rlvr oc-harvest`` (tests/test_oc_fixed_harvest.py), ``lit-rlvr arrol-vote``
(tests/test_arrol_vote.py), ``lit-rlvr g2d`` (tests/test_g2d_pipeline.py), ``lit-rlvr plot`` on a resumed run
(tests/test_plot.py) and ``lit-rlvr report`` after a fit (tests/test_selection_report.py).
"""

from __future__ import annotations

import json
import re
import shutil
from pathlib import Path

import pytest
import yaml

from lit_rlvr.run.cli import SUBCOMMANDS, main
from lit_rlvr.data import PromptDataModule
from lit_rlvr.run.fit_config import build_fit, config_args
from lit_rlvr.probe import histogram, probe_settings

ROOT = Path(__file__).resolve().parents[1]
RUN = ROOT / "docs" / "results" / "oc_grpo_fixed" / "grpo"  # a committed GRPO run: metrics.csv and groups.csv


def _standalone(path: Path) -> bool:
    """A fit config of its own (trainer, model, data and seed), not an overlay such as a method config."""
    return {"trainer", "model", "data", "seed_everything"} <= set(yaml.safe_load(path.read_text()) or {})


FIT_CONFIGS = [p for p in sorted((ROOT / "configs").rglob("*.yaml")) if _standalone(p)]


def test_the_table_holds_the_user_tools_and_every_entry_names_a_function():
    assert sorted(SUBCOMMANDS) == ["arrol-vote", "calibrate", "g2d", "oc-harvest", "plot", "probe", "report"]
    for target, help_line in SUBCOMMANDS.values():
        assert target.count(":") == 1 and help_line


@pytest.mark.parametrize("name", sorted(SUBCOMMANDS))
def test_each_subcommand_answers_help_under_its_own_name(name, capsys):
    with pytest.raises(SystemExit) as done:
        main([name, "--help"])
    assert done.value.code == 0
    out = capsys.readouterr().out
    assert out.startswith(f"usage: lit-rlvr {name} ") and "-h, --help" in out


def test_the_top_level_help_lists_every_user_tool_with_its_line(capsys):
    with pytest.raises(SystemExit) as done:
        main(["--help"])
    assert done.value.code == 0
    out = capsys.readouterr().out
    assert "{fit,validate,test,predict}" in out  # the Trainer's subcommands, as before
    tools = out[out.index("user tools:"):].splitlines()
    for name, (_, help_line) in SUBCOMMANDS.items():
        assert any(line.split() == [name, *help_line.split()] for line in tools), name


def _committed_run(tmp_path: Path) -> Path:
    """The committed run laid out as a fit leaves it: <run>/csv/version_0/{metrics,groups}.csv."""
    version = tmp_path / "run" / "csv" / "version_0"
    version.mkdir(parents=True)
    for name in ("metrics.csv", "groups.csv"):
        shutil.copy(RUN / name, version / name)
    return tmp_path / "run"


def test_report_and_plot_read_a_committed_run(tmp_path, capsys):
    run = _committed_run(tmp_path)
    version = run / "csv" / "version_0"
    main(["report", str(run)])
    out = capsys.readouterr().out
    assert f"wrote {version / 'selection_report.md'}" in out
    assert "zero-variance" in (version / "selection_report.md").read_text()
    main(["plot", str(run), "--out", str(tmp_path / "reward.png")])
    assert f"wrote {tmp_path / 'reward.png'}" in capsys.readouterr().out
    assert (tmp_path / "reward.png").read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"


def test_probe_runs_on_a_fit_config_and_saves_its_histogram(tmp_path, monkeypatch, capsys):
    """Config mode on configs/tiny.yaml (random tiny model): the config's prompts, G, cap and reward, the
    source's task settings replaced by flags, a config flag passed through."""
    monkeypatch.chdir(tmp_path)
    main(["probe", "--config", str(ROOT / "configs" / "tiny.yaml"), "--n", "3", "--g", "2", "--max-new", "4",
          "--task-config", '{"min_terms": 2, "max_terms": 2, "min_digits": 2, "max_digits": 2}',
          "--data.source.init_args.train_size=5", "--save", "probe.json", "--label", "two digits"])
    saved = json.loads((tmp_path / "probe.json").read_text())
    assert saved["label"] == "two digits" and saved["config"] == str(ROOT / "configs" / "tiny.yaml")
    assert saved["prompts_probed"] == 3 and saved["g"] == 2 and saved["max_new_tokens"] == 4
    assert saved["train_size"] == 5 and saved["task_config"]["min_digits"] == 2 and saved["tasks"] == "basic_arithmetic"
    assert sum(saved["histogram"].values()) == 3 and list(saved["histogram"]) == ["0/2", "1/2", "2/2"]
    operands = [re.findall(r"\d+", r["question"])[:2] for r in saved["rates"]]
    assert [[len(x) for x in pair] for pair in operands] == [[2, 2]] * 3  # two-digit terms, as the replaced task config asks
    assert "wrote probe.json" in capsys.readouterr().out


def test_histogram_counts_prompts_per_number_of_successes():
    assert histogram([0.0, 0.25, 0.25, 1.0], 4) == {"0/4": 1, "1/4": 2, "2/4": 0, "3/4": 0, "4/4": 1}


def test_probe_rejects_a_stray_argument():
    with pytest.raises(SystemExit, match="2"):  # argparse's usage error
        main(["probe", "--config", str(ROOT / "configs" / "tiny.yaml"), "stray"])


@pytest.mark.parametrize("config", FIT_CONFIGS, ids=lambda p: str(p.relative_to(ROOT / "configs")))
def test_every_shipped_fit_config_reads_as_the_config_tools_read_it(config):
    """Built as ``lit-rlvr fit`` builds it (no weights loaded, no data generated), and what the probe reads
    from it. Before: the probe read ``model.policy`` from the raw YAML, a KeyError for configs whose model
    is in the class_path/init_args form (configs/quickstart.yaml)."""
    cli = build_fit(config_args([config], ["--trainer.accelerator=cpu"]))  # the GPU configs, read on a CPU
    if not isinstance(cli.datamodule, PromptDataModule):  # G2D's DPO stage trains on preference pairs
        with pytest.raises(SystemExit, match="no training prompts to probe"):
            probe_settings(cli)
        return
    settings = probe_settings(cli)
    raw = yaml.safe_load(config.read_text())
    model, data = raw["model"].get("init_args", raw["model"]), raw["data"].get("init_args", raw["data"])
    assert settings["policy"].name_or_path == model["policy"]["name_or_path"] and settings["policy"].lora is None
    assert settings["rollout"].num_generations == model.get("rollout", {}).get("num_generations", 8)
    assert type(settings["reward"]).__name__ == model["rewards"][0]["class_path"].rsplit(".", 1)[1]
    written = data["source"].get("init_args", {})
    assert {k: settings["source"].get(k) for k in written} == written
