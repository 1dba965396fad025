"""The fit help lists the model's and data's options, errors name the command that shows an option,
abbreviated flags are refused, and the process's thread policy (lit_rlvr.run.threads)."""

from pathlib import Path

import pytest
import torch

from lit_rlvr.run.cli import main
from lit_rlvr.run.cli_help import classes_in_use, help_command
from lit_rlvr.run.threads import SMALL_MACHINE, apply_thread_policy, choose_threads

ROOT = Path(__file__).resolve().parents[1]
TINY = str(ROOT / "configs" / "tiny.yaml")
QUICKSTART = str(ROOT / "configs" / "quickstart.yaml")


def _exit(capsys, *args: str) -> tuple[object, str, str]:
    with pytest.raises(SystemExit) as exc:
        main(list(args))
    captured = capsys.readouterr()
    return exc.value.code, captured.out, captured.err


@pytest.mark.parametrize("flag, close", [
    ("--trainer.max_step=3", "did you mean trainer.max_steps?"),  # before: ran as max_steps=3
    ("--model.rollout.num_generation=3", "did you mean model.rollout.num_generations?"),  # before: taken as the full name
])
def test_an_abbreviated_flag_is_refused_with_the_close_match(capsys, flag, close):
    code, out, err = _exit(capsys, "fit", "--config", TINY, flag, "--print_config")
    assert code == 2 and "max_steps: 3" not in out and "num_generations: 3" not in out
    assert close in err.strip().splitlines()[-1]


def test_fit_help_lists_the_model_and_data_options_of_the_config(capsys):
    # before: --model and --data appeared only as CLASS_PATH; no num_generations, batch_size or max_new_tokens
    code, out, _ = _exit(capsys, "fit", "--config", QUICKSTART, "--help")
    assert code == 0
    first = out.splitlines()[0]
    assert "lit_rlvr.module.GRPOModule" in first and "lit_rlvr.data.PromptDataModule" in first
    for option in ("--model.rollout.num_generations", "--model.rollout.max_new_tokens", "--data.batch_size",
                   "--model.loss.epsilon_high", "--trainer.max_steps"):
        assert option in out, option


def test_an_unknown_model_option_names_the_command_that_lists_its_options(capsys):
    code, _, err = _exit(capsys, "fit", "--config", QUICKSTART, "--model.loss.epsilon_hgih=0.3", "--print_config")
    assert code == 2
    assert "'lit-rlvr fit --model.help lit_rlvr.module.GRPOModule' lists its options" in err.strip().splitlines()[-1]


def test_classes_in_use_follow_the_configs_and_flags(tmp_path):
    dpo = tmp_path / "dpo.yaml"
    dpo.write_text("model:\n  class_path: lit_rlvr.dpo.DPOModule\n")
    assert classes_in_use(["fit"])["model"] == "lit_rlvr.module.GRPOModule"
    assert classes_in_use(["fit", "--config", str(dpo)])["model"] == "lit_rlvr.dpo.DPOModule"
    assert classes_in_use(["fit", "--data=lit_rlvr.g2d.PreferenceDataModule"])["data"] == "lit_rlvr.g2d.PreferenceDataModule"
    assert help_command("trainer", None) == "lit-rlvr fit --help"
    assert help_command("data", "lit_rlvr.data.PromptDataModule") == "lit-rlvr fit --data.help lit_rlvr.data.PromptDataModule"


# ------------------------------------------------------------------ thread policy
def test_small_machines_run_one_thread_unless_the_user_chose():
    assert choose_threads({}, cpus=2)[0] == 1
    assert choose_threads({}, cpus=SMALL_MACHINE + 1)[0] is None  # torch's default
    assert choose_threads({"OMP_NUM_THREADS": "2"}, cpus=2)[0] == 2
    assert choose_threads({"LIT_RLVR_THREADS": "3", "OMP_NUM_THREADS": "2"}, cpus=2)[0] == 3
    with pytest.raises(SystemExit, match="LIT_RLVR_THREADS='x'"):
        choose_threads({"LIT_RLVR_THREADS": "x"}, cpus=2)


def test_apply_thread_policy_sets_torch_and_exports_the_count():
    before = torch.get_num_threads()
    env: dict[str, str] = {}
    try:
        account = apply_thread_policy([], env, cpus=2)
        assert torch.get_num_threads() == 1 and env["OMP_NUM_THREADS"] == "1" and env["MKL_DYNAMIC"] == "FALSE"
        # before: "torch threads: 1 (2 CPUs available, at most 4: one thread; set LIT_RLVR_THREADS=N to change)"
        assert account == "1 torch thread (2 CPUs here: one thread on machines with 4 or fewer; LIT_RLVR_THREADS=N for another count)"
    finally:
        torch.set_num_threads(before)
