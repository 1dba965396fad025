"""Pilot-Commit: its buffer against a plain reference written from the released code, its state, its
accounting, and real tiny fits (one trains; one killed with SIGKILL resumes exactly)."""

import glob
import os
import signal
import subprocess
import sys
from collections import Counter
from pathlib import Path
from types import SimpleNamespace

import numpy as np
import pytest
import torch

from lit_rlvr.accounting import step_metrics
from lit_rlvr.callbacks import PilotCommit
from lit_rlvr.callbacks.pilot_buffer import BufferEntry, PilotBuffer
from lit_rlvr.types import Completion, RolloutBatch, RolloutState, StepContext
from tests.callbacks.fixtures import make_pool
from tests.metrics_files import step_rows

ROOT = Path(__file__).resolve().parents[2]
B, PILOT, G = 4, 8, 32
EPOCH_STEPS = 8  # the fake data module's epoch: steps 0-7, 8-15, ...


# --------------------------------------------------------------------------- the reference (released code)
# databricks/pilot-commit at 6def20e. Each piece names the lines it follows; nothing here imports lit_rlvr.


class RefReplayBuffer:
    """recipe/pc/replay_buffer.py: ReplayBuffer with prompt_sampling_strategy="max_variance"."""

    def __init__(self, max_off_steps):
        self.max_off_steps = max_off_steps
        self.buffer = {}

    def add(self, items, step):  # lines 46-68: keyed by prompt, metric stats from np.mean / np.std
        for prompt_id, acc in items:
            self.buffer[prompt_id] = {"data": acc, "step": step,
                                      "metric_stats": {"mean": float(np.mean(acc)), "std": float(np.std(acc))}}

    def flush(self, current_step, enforce=False):  # lines 70-87
        if enforce:
            n = len(self.buffer)
            self.buffer.clear()
            return n
        evict = 0
        for uid, item in list(self.buffer.items()):
            if current_step - item["step"] > self.max_off_steps:
                del self.buffer[uid]
                evict += 1
        return evict

    def sample(self, size):  # lines 125-183 with _sample_by_variance, lines 242-260
        if len(self.buffer) == 0:
            return [], []
        available = list(self.buffer.keys())
        if len(available) <= size:
            when = [self.buffer[u]["step"] for u in self.buffer]
            self.buffer.clear()
            return available, when
        uid_std = [(u, self.buffer[u]["metric_stats"]["std"], self.buffer[u]["step"]) for u in available]
        uid_std.sort(key=lambda x: (x[1], x[2]), reverse=True)
        selected = [u for u, _, _ in uid_std[:size]]
        when = [self.buffer[u]["step"] for u in selected]
        for u in selected:
            del self.buffer[u]
        return selected, when


def ref_filter_batch(acc_by_prompt, lower, upper):  # pc_ray_trainer.py lines 312-319
    passed = []
    for idx, values in acc_by_prompt.items():
        mean = np.mean(values)
        if mean >= lower and mean <= (1 - upper):
            passed.append(idx)
    return passed


def ref_exclude_batch(acc_by_prompt, threshold):  # pc_ray_trainer.py lines 346-352
    return [idx for idx, values in acc_by_prompt.items() if np.mean(values) >= threshold]


def ref_run(steps, next_chunk, acc_of, lower=0.125, upper=0.25, exclude=1.0, max_off_steps=4, max_rounds=10,
            epoch_steps=EPOCH_STEPS):
    """RayPCTrainer.fit's sampling loop (pc_ray_trainer.py lines 427-700) and its epoch end (lines 842-857),
    on the same prompt stream. Returns per step: committed ids (in order), their when_added, the buffer after
    the step's flush (id, step, mean, std), the excluded ids, and two events: prompts committed and then
    admitted again in the same step (``readmitted``), and rounds whose first 3 × B draws were all excluded
    (``refilled``)."""
    buffer, excluded_applied, to_exclude, out, epoch = RefReplayBuffer(max_off_steps), set(), set(), [], 0
    for step in range(steps):
        evicted = 0
        if step // epoch_steps != epoch:  # end of epoch: flush all, apply exclusions (lines 850-857)
            epoch = step // epoch_steps
            evicted += buffer.flush(step, enforce=True)
            excluded_applied |= to_exclude
            to_exclude = set()
        committed, when, rounds, readmitted, refilled = [], [], 0, [], 0
        while True:
            # a gen batch is 3 × B prompts of the dataset with the excluded rows removed (line 446; rl_dataset.py
            # lines 192-218): on the stream, the next 3 × B not excluded
            chunk, first = [], True
            while len(chunk) < 3 * B:
                drawn = next_chunk(3 * B - len(chunk))
                refilled += first and all(i in excluded_applied for i in drawn)
                chunk += [i for i in drawn if i not in excluded_applied]
                first = False
            rounds += 1
            if len(buffer.buffer) > 0:  # lines 478-506
                ids, w = buffer.sample(min(B - len(committed), len(buffer.buffer)))
                committed += ids
                when += w
            acc = {i: acc_of(i, epoch) for i in chunk}
            passed = ref_filter_batch(acc, lower, upper)  # lines 612-640
            buffer.add([(i, acc[i]) for i in chunk if i in passed], step)
            readmitted += [i for i in chunk if i in passed and i in committed]
            to_exclude |= set(ref_exclude_batch(acc, exclude))  # lines 642-650
            if len(committed) >= B or rounds >= max_rounds:  # lines 668-685
                break
        assert len(set(committed)) == len(committed)  # line 692: B distinct prompts
        evicted += buffer.flush(step)  # lines 698-701
        out.append({"committed": committed, "when": when, "evicted": evicted,
                    "buffer": [(k, v["step"], v["metric_stats"]["mean"], v["metric_stats"]["std"]) for k, v in buffer.buffer.items()],
                    "excluded": sorted(excluded_applied | to_exclude), "readmitted": readmitted, "refilled": refilled})
    return out


# --------------------------------------------------------------------------- driving PilotCommit without an engine


def acc_of(prompt_id, epoch):
    """The fixed pilot outcome of a prompt in an epoch: k of 8 correct, k spread over 0..8."""
    k = (prompt_id * 7 + epoch * 3) % 9
    return [1.0] * k + [0.0] * (PILOT - k)


def acc_easy_block(prompt_id, epoch):
    """Prompts 0-23 all correct in every epoch (excluded from epoch 1 on: a run of 2 × 3B draws); the rest k in 0..7."""
    k = 8 if prompt_id < 24 else (prompt_id * 7 + epoch * 3) % 8
    return [1.0] * k + [0.0] * (PILOT - k)


def scripted(k_of):
    """Pilot outcomes from {prompt id: k correct of 8}; every other prompt all wrong."""
    return lambda prompt_id, epoch: [1.0] * k_of.get(prompt_id, 0) + [0.0] * (PILOT - k_of.get(prompt_id, 0))


class Stream:
    """The data order: prompt ids 0..N-1 again and again (one pass an epoch of EPOCH_STEPS steps is not needed),
    or the ids of ``order`` and then fresh ids from 1000 on."""

    def __init__(self, n=100, order=None):
        self.n, self.pos, self.order = n, 0, order

    def __call__(self, k):
        if self.order is not None:
            out = [self.order[i] if i < len(self.order) else 1000 + i for i in range(self.pos, self.pos + k)]
        else:
            out = [(self.pos + j) % self.n for j in range(k)]
        self.pos += k
        return out


def fake_trainer(epoch_steps=EPOCH_STEPS):
    return SimpleNamespace(world_size=1, datamodule=SimpleNamespace(epoch_of=lambda step: step // epoch_steps))


def fake_host(logprob=-0.5):
    return SimpleNamespace(rollout_settings=SimpleNamespace(num_generations=G), group_size=G, lockstep=False,
                           completion_logprobs=lambda prompts, comps: torch.full((len(comps), max(map(len, comps))), logprob))


def run_step(sel, step, stream, trainer, host, acc=None, epoch_steps=EPOCH_STEPS):
    """One step as GRPOModule and the rollout loop run it (plan rounds, carried rows last); returns the batch."""
    acc = acc or acc_of
    ids = stream(3 * B)
    pool = make_pool(ids, B)
    pool.context = StepContext(step=step, seed=0, group_size=G)
    sel.select_prompts(trainer, host, pool)
    drawer = lambda n: make_pool(stream(n), B)  # noqa: E731 (the same stream, as the released dataloader)
    state = RolloutState(pool=pool, drawer=drawer)
    prompt, rounds, rewards, comps = [], [], [], []
    while True:
        plan = sel.plan(state)
        if int(plan.sum()) == 0 or state.round >= sel.max_rounds:
            break
        epoch = step // epoch_steps
        for p in torch.nonzero(plan > 0).flatten().tolist():
            pid = int(pool.ids[p])
            values = acc(pid, epoch) if int(plan[p]) == PILOT else [float(j % 2) for j in range(int(plan[p]))]
            state.rewards[p] += values
            prompt += [p] * len(values)
            rounds += [state.round] * len(values)
            rewards += values
            comps += [Completion([pid, j], [-1.0, -0.25], "stop") for j in range(len(values))]
        state.round += 1
    carried = [False] * len(prompt)
    for p, group in state.carried:
        prompt += [p] * len(group)
        rounds += [-1] * len(group)
        rewards += group.rewards.tolist()
        comps += group.completions
        carried += [True] * len(group)
    n = len(prompt)
    batch = RolloutBatch(pool=pool, prompt_index=torch.tensor(prompt, dtype=torch.long),
                         prompt_token_ids=[[int(i)] for i in pool.ids], completions=comps,
                         rewards=torch.tensor(rewards, dtype=torch.float32), round=torch.tensor(rounds, dtype=torch.long),
                         keep=torch.ones(n, dtype=torch.bool), carried=torch.tensor(carried, dtype=torch.bool))
    sel.on_rollouts_scored(trainer, host, batch)
    batch.keep &= sel.select_rollouts(trainer, host, batch)
    return batch


def observed(sel, batch):
    committed = list(sel._committed.values())  # in commit order
    return {"committed": [e.prompt_id for e in committed], "when": [e.step for e in committed],
            "evicted": int(sel.metrics()["evicted"]),
            "buffer": [(k, e.step, e.mean, e.std) for k, e in sel.buffer.entries.items()],
            "excluded": sorted(sel.buffer.excluded)}


def new_selector(**kw):
    sel = PilotCommit(pilot_size=PILOT, **kw)
    sel.setup_selection(fake_trainer(), fake_host(), [sel])
    return sel


# --------------------------------------------------------------------------- tests


@pytest.mark.parametrize("scenario", ["spread", "readmit_and_refill"])
def test_buffer_admission_eviction_priority_and_staleness_equal_the_released_code(scenario):
    steps, n, acc = (18, 100, acc_of) if scenario == "spread" else (18, 48, acc_easy_block)
    ref = ref_run(steps, Stream(n), acc)
    sel, stream, trainer, host = new_selector(), Stream(n), fake_trainer(), fake_host()
    ours, skipped = [], 0
    for s in range(steps):
        ours.append(observed(sel, run_step(sel, s, stream, trainer, host, acc)))
        skipped += sel.metrics()["skipped_excluded"]
    for s in range(steps):
        expected = {k: v for k, v in ref[s].items() if k not in ("readmitted", "refilled")}
        assert ours[s] == expected, f"step {s}: {ours[s]} != {expected}"
    if scenario == "readmit_and_refill":
        # (a) a prompt committed from the buffer, piloted again in the band later in the step: it stays buffered and
        # is committed at a later step; (b) a round whose first 3B draws are all excluded: drawing goes on
        readmit = [(s, i) for s in range(steps) for i in ref[s]["readmitted"]]
        assert readmit and any(any(i in ref[t]["committed"] for t in range(s + 1, steps)) for s, i in readmit)
        assert sum(r["refilled"] for r in ref) >= 3
        assert all(len(r["committed"]) == B for r in ref)
        return
    # the scenario exercises every rule: cross-step commits, ranking past B, eviction and exclusion across epochs
    assert any(w < s for s in range(steps) for w in ref[s]["when"]), "no pilot of an earlier step was committed"
    assert any(len(r["buffer"]) > B for r in ref), "the buffer never held more than a batch (priority untested)"
    assert ref[EPOCH_STEPS]["excluded"], "nothing excluded"
    assert sum(r["evicted"] for r in ref[:EPOCH_STEPS]) > 0, "no entry went stale within an epoch"
    assert ref[EPOCH_STEPS]["evicted"] > 0, "the epoch change flushed nothing"
    assert skipped > 0, "no excluded prompt came back to be skipped"


def test_a_prompt_committed_then_piloted_again_in_the_band_is_committed_at_the_next_step():
    """(a): prompt 4 is committed from the buffer at step 1's round 0, drawn again at round 1 and in the band: the
    released buffer keeps the new pilot (sample deletes, add re-inserts) and commits it at step 2."""
    k = {i: 4 for i in (0, 1, 2, 3, 4, 24, 25, 26, 27)}
    order = list(range(24)) + list(range(24, 36)) + [4] + list(range(36, 47)) + list(range(48, 200))
    sel, stream, trainer, host = new_selector(max_rounds=3), Stream(order=order), fake_trainer(), fake_host()
    steps = [observed(sel, run_step(sel, s, stream, trainer, host, scripted(k))) for s in range(3)]
    assert steps[0]["committed"] == [0, 1, 2, 3] and steps[1]["committed"] == [4, 24, 25, 26]
    assert (4, 1) in [(i, st) for i, st, _, _ in steps[1]["buffer"]]  # the new pilot, of step 1
    assert steps[2]["committed"] == [27, 4] and steps[2]["when"] == [1, 1]
    ref = ref_run(3, Stream(order=order), scripted(k), max_rounds=3)
    assert [r["committed"] for r in ref] == [r["committed"] for r in steps]


def test_a_prompt_is_committed_at_most_once_a_step():
    """Prompt 4, committed at step 1's round 0 and piloted again in the band at round 1, is not committed again at
    round 2 though the batch is short (the released trainer asserts B distinct prompts, line 692): it waits."""
    k = {i: 4 for i in (0, 1, 2, 3, 4, 24, 25)}
    order = list(range(24)) + list(range(24, 36)) + [4] + list(range(36, 47)) + list(range(48, 200))
    sel, stream, trainer, host = new_selector(max_rounds=4), Stream(order=order), fake_trainer(), fake_host()
    steps = [observed(sel, run_step(sel, s, stream, trainer, host, scripted(k))) for s in range(3)]
    assert steps[1]["committed"] == [4, 24, 25] and 4 in [i for i, *_ in steps[1]["buffer"]]
    assert 4 in steps[2]["committed"]


@pytest.mark.parametrize("where", ["round 0", "round 1"])
def test_a_round_of_excluded_prompts_draws_on_until_the_batch_is_full(where):
    """(b): at step 1 (a new epoch) the step's pool, or round 1's draws, are all prompts excluded at step 0. The
    released dataset has them removed, so a round pilots 3B prompts still: drawing goes on and B are committed."""
    easy = list(range(12))  # all correct at step 0: excluded from epoch 1 on
    k = {**{i: 8 for i in easy}, **{i: 4 for i in range(12, 16)}, **{i: 4 for i in range(40, 44)}}
    later = easy + list(range(40, 52)) if where == "round 0" else list(range(24, 36)) + easy + list(range(40, 52))
    order = easy + list(range(12, 24)) + list(range(100, 112)) + later  # step 0's rounds 0, 1, 2; then step 1's
    trainer, host = fake_trainer(epoch_steps=1), fake_host()
    for replace, committed in ((True, [40, 41, 42, 43]), (False, [])):
        sel, stream = new_selector(max_rounds=4, replace_excluded=replace), Stream(order=order)
        steps = [observed(sel, run_step(sel, s, stream, trainer, host, scripted(k), epoch_steps=1)) for s in range(2)]
        assert steps[0]["committed"] == [12, 13, 14, 15]
        assert steps[1]["committed"] == committed  # replace_excluded=False: the round pilots none, the step ends
        if replace:
            ref = ref_run(2, Stream(order=order), scripted(k), max_rounds=4, epoch_steps=1)
            assert [{k: v for k, v in r.items() if k not in ("readmitted", "refilled")} for r in ref] == steps
            assert ref[1]["refilled"] == 1


def test_random_buffer_sampling_is_uniform_and_seeded_and_takes_all_when_few():
    """``buffer_sampling: random`` (the released 4B script): ``random.sample`` of the available when more than needed
    (replay_buffer.py line 138), here from a generator seeded per step, rank and round, so a resume draws the same."""
    buf = PilotBuffer()
    for i in range(6):
        buf.add(BufferEntry(prompt_id=i, step=0, epoch=0, mean=0.5, std=0.1 * i, count=8))
    assert buf.select(6, method="random", generator=torch.Generator().manual_seed(0)) == list(range(6))
    counts = Counter()
    for seed in range(600):
        counts.update(buf.select(2, method="random", generator=torch.Generator().manual_seed(seed)))
    assert all(150 < counts[i] < 250 for i in range(6)), counts  # each a third of the time, whatever its std
    assert buf.select(2) == [5, 4]  # max_variance
    runs = {}
    for name, kw in (("variance", {}), ("random", {"buffer_sampling": "random"}), ("random again", {"buffer_sampling": "random"})):
        sel, stream, trainer, host = new_selector(**kw), Stream(), fake_trainer(), fake_host()
        runs[name] = [observed(sel, run_step(sel, s, stream, trainer, host)) for s in range(10)]
    assert runs["random"] == runs["random again"] != runs["variance"]
    assert all(len(r["committed"]) == B for r in runs["random"])
    with pytest.raises(ValueError, match="buffer_sampling"):
        PilotCommit(buffer_sampling="best")


def test_rows_trained_are_pilot_plus_commit_of_committed_prompts():
    sel, stream, trainer, host = new_selector(), Stream(), fake_trainer(), fake_host()
    for s in range(3):
        batch = run_step(sel, s, stream, trainer, host)
        m = sel.metrics()
        kept = batch.prompt_index[batch.keep]
        sizes = torch.bincount(kept).tolist()
        assert sorted(x for x in sizes if x) == [G] * B  # B groups of pilot + commit
        assert m["trained_rollouts"] == B * G == float(batch.keep.sum())
        assert m["commit_rollouts"] == B * (G - PILOT)
        assert m["pilot_rollouts"] + m["replayed_rollouts"] + m["commit_rollouts"] == len(batch)
        if s > 0:
            assert m["replayed_rollouts"] > 0  # a pilot of an earlier step joined its commit


def test_the_accounting_counts_pilot_rollouts_as_spent_and_carried_ones_not_again():
    sel, stream, trainer, host = new_selector(), Stream(), fake_trainer(), fake_host()
    for s in range(3):
        batch = run_step(sel, s, stream, trainer, host)
        m = sel.metrics()
        counts = step_metrics(batch, batch.rewards >= 1)
        assert counts["rollouts/generated"] == m["pilot_rollouts"] + m["commit_rollouts"]
        assert counts["tokens/generated"] == m["pilot_tokens"] + m["commit_tokens"]
        assert counts["rollouts/generated"] == len(batch) - m["replayed_rollouts"]


def test_importance_weights_equal_a_plain_reference_and_are_off_by_default():
    trainer, host = fake_trainer(), fake_host(logprob=-0.5)
    plain = new_selector()
    stream = Stream()
    for s in range(2):
        batch = run_step(plain, s, stream, trainer, host)
    assert plain.token_weights(trainer, host, batch) is None  # the released code: no correction
    corrected, stream = new_selector(importance_correction=True, importance_cap=1.5), Stream()
    for s in range(2):
        batch = run_step(corrected, s, stream, trainer, host)
    weights = corrected.token_weights(trainer, host, batch)
    carried = batch.carried_mask & batch.keep
    assert carried.any()
    for r in range(len(batch)):
        # behaviour log-probs [-1.0, -0.25], current -0.5: min(exp(0.5), 1.5) = 1.5, exp(-0.25)
        expected = [min(float(np.exp(-0.5 - b)), 1.5) for b in (-1.0, -0.25)] if carried[r] else [1.0, 1.0]
        assert torch.allclose(weights[r], torch.tensor(expected, dtype=torch.float32)), r


@pytest.mark.parametrize("sampling", ["max_variance", "random"])
def test_state_round_trips_strictly_and_safely_and_resumes_the_same_decisions(tmp_path, sampling):
    trainer, host = fake_trainer(), fake_host()
    a, stream = new_selector(buffer_sampling=sampling), Stream()
    for s in range(3):
        run_step(a, s, stream, trainer, host)
    state = a.state_dict()
    assert set(state) == {"buffer", "totals"} and state["buffer"]["entries"]
    torch.save(state, tmp_path / "s.pt")
    b = new_selector(buffer_sampling=sampling)
    b.load_state_dict(torch.load(tmp_path / "s.pt", weights_only=True))  # what a checkpoint load allows
    stream_b = Stream()
    stream_b.pos = stream.pos
    for s in range(3, 7):
        assert observed(a, run_step(a, s, stream, trainer, host)) == observed(b, run_step(b, s, stream_b, trainer, host))
        assert a.metrics() == pytest.approx(b.metrics(), nan_ok=True)
    legacy = {**state, "buffer": {**state["buffer"], "entries": [{**e, "pool_index": -1} for e in state["buffer"]["entries"]]}}
    c, d = new_selector(buffer_sampling=sampling), new_selector(buffer_sampling=sampling)
    c.load_state_dict(legacy)  # a checkpoint from before 2026-12-06, whose entries carried pool_index −1
    d.load_state_dict(state)
    assert repr(c.buffer) == repr(d.buffer)
    with pytest.raises(ValueError, match="PilotCommit.*no key 'buffer'"):
        new_selector().load_state_dict({"totals": state["totals"]})
    assert PilotCommit(pilot_size=8).state_key != PilotCommit(pilot_size=4).state_key


def test_bad_settings_fail_at_start_naming_the_flag():
    with pytest.raises(ValueError, match="pilot_size=32 must be in \\[1, model.rollout.num_generations=32\\)"):
        PilotCommit(pilot_size=32).setup_selection(fake_trainer(), fake_host(), [])
    with pytest.raises(ValueError, match="accuracy_band"):
        PilotCommit(accuracy_band=(0.8, 0.2))
    lockstep = SimpleNamespace(rollout_settings=SimpleNamespace(num_generations=G), group_size=G, lockstep=True)
    with pytest.raises(ValueError, match="importance_correction: false"):
        PilotCommit(importance_correction=True).setup_selection(fake_trainer(), lockstep, [])
    assert PilotBuffer().select(0) == []


# --------------------------------------------------------------------------- real tiny fits

FIT = [sys.executable, "-m", "lit_rlvr.run.cli", "fit", "--config", str(ROOT / "configs" / "tiny.yaml"),
       "--config", str(ROOT / "configs" / "methods" / "pilot_commit.yaml"),
       "--model.rewards+=lit_rlvr.rewards.CallableReward", "--model.rewards.fn=tests.helpers:mixed_difficulty_reward",
       "--trainer.limit_val_batches=0", "--model.rollout.max_new_tokens=4",
       "--model.evaluation.before_training=false"]
SMALL = ["--data.source.init_args.train_size=24"]
"""24 prompts (two pools an epoch): the resumed steps cross an epoch change, so the buffer's epoch flush and
the exclusions are restored too. The tiny fit keeps tiny.yaml's 64, where pilots wait in the buffer across steps."""


def _fit(workdir: Path, name: str, steps: int, *extra: str, check: bool = True) -> subprocess.CompletedProcess:
    env = {**os.environ, "PYTHONPATH": str(ROOT), "OMP_NUM_THREADS": "1"}
    cmd = [*FIT, f"--trainer.max_steps={steps}", f"--trainer.default_root_dir={name}", *extra]
    done = subprocess.run(cmd, cwd=workdir, env=env, capture_output=True, text=True, timeout=900)
    if check:
        assert done.returncode == 0, done.stderr[-4000:]
    return done


@pytest.mark.integration
def test_a_tiny_fit_trains_counts_pilots_as_spent_and_commits_from_its_buffer(tmp_path):
    _fit(tmp_path, "run", 4)
    rows = step_rows(tmp_path / "run", untimed=True)
    assert len(rows) == 4
    key = "select/PilotCommit/"
    for r in rows:
        assert float(r["rollouts/generated"]) == float(r[key + "pilot_rollouts"]) + float(r[key + "commit_rollouts"])
        assert float(r["tokens/generated"]) == float(r[key + "pilot_tokens"]) + float(r[key + "commit_tokens"])
        assert float(r["rollouts/kept"]) == float(r[key + "trained_rollouts"]) > 0
    assert sum(float(r[key + "committed_from_buffer"]) for r in rows) > 0
    assert float(rows[-1]["cumulative/rollouts_generated"]) == float(rows[-1][key + "cumulative_pilot_rollouts"]) + float(
        rows[-1][key + "cumulative_commit_rollouts"])
    (ckpt,) = glob.glob(str(tmp_path / "run" / "csv" / "version_*" / "checkpoints" / "last.ckpt"))
    saved = torch.load(ckpt, weights_only=True)["callbacks"]
    (state,) = [v for k, v in saved.items() if k.startswith("PilotCommit")]
    assert state["totals"]["pilot_rollouts"] == float(rows[-1][key + "cumulative_pilot_rollouts"])


@pytest.mark.integration
def test_a_fit_killed_with_sigkill_resumes_with_the_same_numbers(tmp_path):
    """SIGKILL at the start of step 3 (the last checkpoint is step 2's): the resumed run logs what a straight run logs."""
    straight = step_rows(tmp_path / "straight", untimed=True) if _fit(tmp_path, "straight", 5, *SMALL) else None
    killed = _fit(tmp_path, "killed", 5, *SMALL, "--trainer.callbacks+=tests.fit_callbacks.SignalAtStep",
                  "--trainer.callbacks.init_args.step=3", f"--trainer.callbacks.init_args.signum={int(signal.SIGKILL)}", check=False)
    assert killed.returncode == -signal.SIGKILL, killed.stderr[-2000:]
    (ckpt,) = glob.glob(str(tmp_path / "killed" / "csv" / "version_*" / "checkpoints" / "last.ckpt"))
    _fit(tmp_path, "resumed", 5, *SMALL, "--ckpt_path", ckpt)
    resumed = step_rows(tmp_path / "resumed", untimed=True)
    assert step_rows(tmp_path / "killed", untimed=True)[:2] + resumed == straight


@pytest.mark.integration
def test_two_ddp_ranks_hold_the_same_buffer(tmp_path):
    """2 processes (gloo on CPU): after every step both ranks hold the same buffer, exclusions and totals."""
    done = _fit(tmp_path, "ddp", 4, *SMALL, "--trainer.strategy=ddp", "--trainer.devices=2",
                "--trainer.callbacks+=tests.fit_callbacks.DumpSelectorState")
    assert done.returncode == 0
    rank0 = torch.load(tmp_path / "selector_dump" / "rank0.pt", weights_only=False)["states"]
    rank1 = torch.load(tmp_path / "selector_dump" / "rank1.pt", weights_only=False)["states"]
    (key,) = [k for k in rank0 if k.startswith("PilotCommit")]
    assert rank0[key]["totals"]["pilot_rollouts"] > 0
    assert repr(rank0[key]) == repr(rank1[key])
