"""The worked example of docs/writing_a_selector.md (``tests/examples/skip_solved.py``): the page shows
it verbatim, it skips what it should, its state round-trips strictly, and it runs in a real tiny fit
that resumes from a checkpoint with the same per-step numbers."""

import glob
import inspect
import os
import re
from pathlib import Path

import pytest
import torch

from lit_rlvr.run.cli import main
from tests.callbacks.fixtures import at_step, make_batch, make_pool
from tests.assertions import assert_same
from tests.examples.skip_solved import SkipSolved
from tests.metrics_files import step_rows

ROOT = Path(__file__).resolve().parents[2]
PAGE = ROOT / "docs" / "writing_a_selector.md"
EXAMPLE, CONFIG = ROOT / "tests" / "examples" / "skip_solved.py", ROOT / "tests" / "examples" / "skip_solved.yaml"
TINY = str(ROOT / "configs" / "tiny.yaml")
EVEN = ["--model.rewards+=lit_rlvr.rewards.CallableReward", "--model.rewards.fn=tests.helpers:even_answer_reward"]


def _block_after(text: str, marker: str, lang: str) -> str:
    """The first ```lang block after the line holding ``marker``."""
    tail = text[text.index(marker):]
    match = re.search(rf"```{lang}\n(.*?)```", tail, flags=re.DOTALL)
    assert match, f"no ```{lang} block after {marker!r}"
    return match.group(1)


def test_the_page_shows_the_example_its_config_and_its_state_test_verbatim():
    page = PAGE.read_text()
    assert _block_after(page, "tests/examples/skip_solved.py", "python") == EXAMPLE.read_text()
    assert _block_after(page, "tests/examples/skip_solved.yaml", "yaml") == CONFIG.read_text()
    assert _block_after(page, "The state round-trip, verbatim", "python") == inspect.getsource(test_its_state_round_trips_and_loads_strictly)


def _observe(selector, pool, groups, step):
    selector.on_rollouts_scored(None, None, at_step(make_batch(pool, groups), _Step(step)))


class _Step:
    def __init__(self, step):
        self.steps_done, self.seed = step, 0


def test_a_prompt_solved_at_its_last_two_visits_is_skipped():
    sel = SkipSolved(visits=2)
    pool = make_pool([5, 7, 9], batch_size=3)
    _observe(sel, pool, {0: [1, 1], 1: [1, 0], 2: [1, 1]}, step=0)  # 5 and 9 solved once, 7 not
    _observe(sel, pool, {0: [1, 1], 1: [1, 1], 2: [0, 1]}, step=1)  # 5 twice in a row; 9's streak ends
    assert sel.table.get("streak", [5, 7, 9]).tolist() == [2, 1, 0]
    assert sel.metrics() == {"prompts_on_streak": 1.0}
    fresh = at_step(make_pool([9, 5, 7, 11], batch_size=2), _Step(2))
    sel.on_train_batch_start(None, None, fresh, 0)  # what Lightning calls before the step
    assert fresh.keep.tolist() == [True, False, True, True]  # only 5 is skipped
    assert sel.metrics()["skipped"] == 1.0


def test_its_state_round_trips_and_loads_strictly():
    sel = SkipSolved(visits=2)
    pool = make_pool([3, 4], batch_size=2)
    _observe(sel, pool, {0: [1, 1], 1: [0, 1]}, step=0)
    state = sel.state_dict()
    assert list(state) == ["table"] and list(state["table"]) == ["streak"]
    resumed = SkipSolved(visits=2)
    resumed.load_state_dict(state)
    assert_same(state, resumed.state_dict())
    assert resumed.table.get("streak", [3, 4]).tolist() == [1, 0]
    with pytest.raises(ValueError, match="SkipSolved.*no key 'table'.*an unknown key 'tabel'"):
        SkipSolved(visits=2).load_state_dict({"tabel": state["table"]})
    assert SkipSolved(visits=2).state_key != SkipSolved(visits=3).state_key


def test_an_undeclared_metric_fails_naming_it():
    with pytest.raises(ValueError, match=r"SkipSolved reports metrics \['skiped'\] it does not declare"):
        SkipSolved().set_metrics({"skiped": 1.0})


COMMON = ["fit", "--config", TINY, "--config", str(CONFIG), *EVEN, "--data.source.init_args.train_size=8",
          "--trainer.limit_val_batches=0", "--model.evaluation.before_training=false", "--trainer.callbacks.init_args.visits=1"]
"""configs/tiny.yaml with the page's YAML and visits=1, on 8 prompts (steps 2 and 3 revisit those of steps 0
and 1) and a reward that solves every group of a prompt with an even answer: those are skipped on revisit."""


def _fit(tmp_path, name: str, steps: int, ckpt: str | None = None) -> str:
    os.chdir(tmp_path)
    main([*COMMON, f"--trainer.max_steps={steps}", f"--trainer.default_root_dir={name}", *(["--ckpt_path", ckpt] if ckpt else [])])
    return str(tmp_path / name)


def test_a_tiny_fit_runs_it_logs_its_metrics_and_saves_its_state(tmp_path):
    run = _fit(tmp_path, "straight", 4)
    rows = step_rows(run, untimed=True)
    assert len(rows) == 4
    skipped = [float(r["select/SkipSolved/skipped"]) for r in rows]
    assert skipped[:2] == [0.0, 0.0] and skipped[2] > 0  # first visits: nothing to skip; revisits: the solved ones
    assert all(r["select/SkipSolved/prompts_on_streak"] != "" for r in rows)
    (ckpt,) = glob.glob(os.path.join(run, "csv", "version_*", "checkpoints", "last.ckpt"))
    saved = torch.load(ckpt, weights_only=False)["callbacks"][SkipSolved(visits=1).state_key]
    assert list(saved) == ["table"] and int((saved["table"]["streak"] > 0).sum()) > 0


@pytest.mark.integration
def test_a_fit_resumed_from_its_checkpoint_logs_the_same_numbers(tmp_path):
    straight = step_rows(_fit(tmp_path, "straight", 4), untimed=True)
    first = _fit(tmp_path, "first", 2)
    (ckpt,) = glob.glob(os.path.join(first, "csv", "version_*", "checkpoints", "last.ckpt"))
    resumed = step_rows(_fit(tmp_path, "resumed", 4, ckpt), untimed=True)
    assert step_rows(first, untimed=True) + resumed == straight
