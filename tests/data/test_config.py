"""The data module as LightningCLI builds it: jsonargparse (omegaconf mode) from YAML, sources by class_path."""

import json

from jsonargparse import ArgumentParser

from lit_rlvr.data import HFDatasetSource, PromptDataModule, ReasoningGymSource


def _parser():
    p = ArgumentParser(parser_mode="omegaconf")
    p.add_class_arguments(PromptDataModule, "data")
    return p


def test_yaml_builds_reasoning_gym_data_module():
    p = _parser()
    cfg = p.parse_string(
        """
data:
  source:
    class_path: lit_rlvr.data.ReasoningGymSource
    init_args:
      tasks: [basic_arithmetic, chain_sum]
      task_config: {chain_sum: {min_terms: 2, max_terms: 2}}
      train_size: 30
      val_size: 4
  batch_size: 4
  pool_multiple: 2.0
  system_prompt: "# Rules\\nAnswer inside <answer> tags."
"""
    )
    dm = p.instantiate(cfg).data
    assert isinstance(dm.source, ReasoningGymSource) and dm.source.tasks == ["basic_arithmetic", "chain_sum"]
    assert dm.pool_size == 8 and dm.num_train == 60
    # a system prompt starting with '#' survives the parser (it would be None typed Optional[str])
    assert dm.pool(0).messages[0][0] == {"role": "system", "content": "# Rules\nAnswer inside <answer> tags."}


def test_yaml_gsm8k_style_regex_survives_the_parser(tmp_path):
    f = tmp_path / "gsm.jsonl"
    f.write_text("".join(json.dumps({"question": f"q{i}", "answer": f"work\n#### {i}"}) + "\n" for i in range(5)))
    p = _parser()
    cfg = p.parse_string(
        f"""
data:
  source:
    class_path: lit_rlvr.data.HFDatasetSource
    init_args:
      path: {f}
      val_split: null
      val_size: 1
      answer_regex: '#### (.*)$'
  batch_size: 2
"""
    )
    dm = p.instantiate(cfg).data
    assert isinstance(dm.source, HFDatasetSource) and dm.source.answer_regex == "#### (.*)$"
    assert sorted(r.answer for r in dm.train_records + dm.val_records) == ["0", "1", "2", "3", "4"]
