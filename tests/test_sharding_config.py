"""FSDP2 set-up without processes: bad ModelParallelStrategy meshes and GPU configs fail at start-up naming
the flag; the decoder layers FSDP2 shards are found in plain and peft models."""

from pathlib import Path

import pytest

from lit_rlvr.run.cli import main
from lit_rlvr.policy import LoraSettings, PolicyConfig, load_policy
from lit_rlvr.sharding import data_parallel_mesh, decoder_layers, is_sharded, local_fraction

ROOT = Path(__file__).resolve().parents[1]
TINY, FSDP2 = str(ROOT / "configs" / "tiny.yaml"), str(ROOT / "configs" / "cpu" / "fsdp2.yaml")


def _start_up_error(*args: str) -> str:
    with pytest.raises(SystemExit) as exit_info:
        main(["fit", "--config", TINY, "--config", FSDP2, *args])
    return str(exit_info.value.code)


def test_tensor_parallel_is_refused_naming_the_flag():
    message = _start_up_error("--trainer.strategy.init_args.tensor_parallel_size=2")
    assert "trainer.strategy.init_args.tensor_parallel_size=2" in message
    assert "tensor_parallel_size=1" in message and "data_parallel_size=2" in message


def test_data_parallel_size_must_match_the_processes():
    message = _start_up_error("--trainer.strategy.init_args.data_parallel_size=4")
    assert "data_parallel_size=4" in message and "trainer.devices=2" in message
    assert "Set trainer.strategy.init_args.data_parallel_size=2" in message


def test_auto_mesh_sizes_are_refused():
    # Lightning's "auto" would make every device of the node a tensor-parallel rank
    message = _start_up_error("--trainer.strategy.init_args.tensor_parallel_size=auto")
    assert "tensor_parallel_size=auto" in message


def test_fsdp2_gpu_config_fails_on_a_machine_without_a_gpu():
    import torch

    if torch.cuda.is_available():
        pytest.skip("this machine has a GPU")
    with pytest.raises(SystemExit) as exit_info:
        main(["fit", "--config", str(ROOT / "configs" / "gpu" / "one_node_fsdp.yaml")])
    assert "no CUDA GPU" in str(exit_info.value.code)


@pytest.mark.parametrize("lora", [False, True])
def test_decoder_layers_are_found_under_peft_too(lora):
    model, _ = load_policy(PolicyConfig(name_or_path="tiny", tiny_layers=3, lora=LoraSettings(r=4) if lora else None))
    layers = decoder_layers(model)
    assert len(layers) == 3 and all(type(l).__name__ == "LlamaDecoderLayer" for l in layers)
    assert not is_sharded(model) and local_fraction(model) == 1.0
    assert data_parallel_mesh(None) is None  # no trainer, or a strategy other than ModelParallelStrategy: no sharding


def test_a_model_without_decoder_layers_fails_naming_the_alternative():
    import torch

    with pytest.raises(ValueError, match="trainer.strategy: ddp"):
        decoder_layers(torch.nn.Linear(2, 2))
