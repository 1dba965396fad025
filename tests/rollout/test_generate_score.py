"""One generate-and-score function (``lit_rlvr.rollout.generate_score``): what it does, and that it is the only one.

The rollout loop, pruning, revision, evaluation and the task probe all call it; no other module of
``lit_rlvr`` calls a rollout engine's ``generate`` or a reward scorer's ``score`` itself.
"""

import ast
from pathlib import Path

from lit_rlvr.rewards import RewardFunction, RewardScorer
from lit_rlvr.rollout import GenerationRequest, SamplingConfig
from lit_rlvr.rollout.generate_score import generate_and_score
from lit_rlvr.types import Completion
from tests.callbacks.fixtures import make_pool

PACKAGE = Path(__file__).resolve().parents[2] / "lit_rlvr"
HOME = PACKAGE / "rollout" / "generate_score.py"


class Length(RewardFunction):
    """In process: the completion's length in characters, against answer "a" only."""

    name = "length"

    def score(self, completion, answer, metadata):
        assert answer == "a"
        return float(len(completion))


class Engine:
    """Request i's k-th sample is the text "<prompt token>x<k>"; records each call."""

    def __init__(self):
        self.calls = []

    def generate(self, requests, sampling):
        self.calls.append((len(requests), sampling.max_new_tokens))
        return [[Completion([1], [0.0], "stop" if k % 2 == 0 else "length", text=f"{r.prompt_token_ids[0]}x{k}")
                 for k in range(r.n)] for r in requests]


def test_one_engine_call_then_one_scorer_call_over_the_chosen_rows():
    pool, engine = make_pool([10, 11, 12], batch_size=3), Engine()
    scorer = RewardScorer([Length()])
    requests = [GenerationRequest([7], 2), GenerationRequest([88], 3)]
    out = generate_and_score(engine, scorer, pool, requests, [2, 0], SamplingConfig(1.0, 1.0, 5))
    assert engine.calls == [(2, 5)] and out.owner == [2, 2, 0, 0, 0] and out.scored == [0, 1, 2, 3, 4]
    assert [c.text for c in out.completions] == ["7x0", "7x1", "88x0", "88x1", "88x2"]
    assert out.result.total.tolist() == [3.0, 3.0, 4.0, 4.0, 4.0] and [len(o) for o in out.outputs] == [2, 3]
    # only the stopped rows scored; each row completed (joined) before scoring
    out = generate_and_score(engine, scorer, pool, requests, [2, 0], SamplingConfig(1.0, 1.0, 5),
                             complete=lambda i, c: Completion(c.token_ids, c.logprobs, c.finish_reason, text=c.text + "!" * i),
                             score_rows=lambda rows: [i for i, c in enumerate(rows) if c.finish_reason == "stop"])
    assert out.scored == [0, 2, 4] and out.result.total.tolist() == [3.0, 6.0, 8.0]
    # no requests: no engine call when asked to skip it, the scorer still called (with no rows)
    before = dict(scorer.calls)
    out = generate_and_score(engine, scorer, pool, [], [], SamplingConfig(1.0, 1.0, 5), skip_empty=True)
    assert len(engine.calls) == 2 and out.result.total.numel() == 0 and dict(scorer.calls) == before
    generate_and_score(engine, scorer, pool, [], [], SamplingConfig(1.0, 1.0, 5))
    assert engine.calls[-1] == (0, 5)


def _receiver(call: ast.Call) -> str:
    return ast.unparse(call.func.value).lower() if isinstance(call.func, ast.Attribute) else ""


def test_no_other_module_generates_or_scores_itself():
    """An engine's ``generate`` (a receiver named ``*engine*`` or ``*Engine(...)``) or a scorer's ``score``
    (``*scorer*``) is called only in ``generate_score.py``: the loop, pruning, revision, evaluation and the
    probe go through ``generate_and_score``. The engines themselves (``rollout/hf.py``, ``vllm*.py``) call
    their models, not an engine."""
    found = []
    for path in sorted(PACKAGE.rglob("*.py")):
        if path == HOME:
            continue
        for node in ast.walk(ast.parse(path.read_text(), filename=str(path))):
            if not (isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute)):
                continue
            who = _receiver(node)
            if (node.func.attr == "generate" and "engine" in who) or (node.func.attr == "score" and "scorer" in who):
                found.append(f"{path.relative_to(PACKAGE.parent)}:{node.lineno}: {ast.unparse(node.func)}(...)")
    assert not found, "call generate_and_score (lit_rlvr.rollout.generate_score) instead:\n" + "\n".join(found)
    # the check sees these calls where they are: in the one function
    home = [n for n in ast.walk(ast.parse(HOME.read_text())) if isinstance(n, ast.Call) and isinstance(n.func, ast.Attribute)]
    assert {n.func.attr for n in home if "engine" in _receiver(n) or "scorer" in _receiver(n)} == {"generate", "score"}
