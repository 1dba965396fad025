"""Selection methods read only the ``SelectionHost`` protocol of the module they are handed.

* Static: every file of ``lit_rlvr/callbacks/`` is parsed; an attribute read or call on a
  function's module argument (``pl_module``, ``module``, ``host``), on a local name it is assigned
  to, or on a ``self`` attribute it is stored in (ARRoL keeps it for ``prune``), and a
  ``getattr``/``hasattr`` of it by a constant name, must be a member of ``SelectionHost``.
  The step, seed, rank and group size come from the record's ``StepContext`` instead.
* The checker itself fails on the accesses it exists to catch.
* ``GRPOModule`` and the simulator's ``SimModule`` have every member, without subclassing it.
"""

from __future__ import annotations

import ast
from pathlib import Path

from lit_rlvr.selection_host import SelectionHost, batch_host_members, host_members

ROOT = Path(__file__).resolve().parents[1]
CALLBACKS = ROOT / "lit_rlvr" / "callbacks"
MODULE_ARGS = {"pl_module", "module", "host"}


def _aliases(func: ast.AST, self_attrs: set[str]) -> set[str]:
    """Local names bound to the module argument in ``func`` (its parameters and plain re-bindings)."""
    names = {a.arg for a in [*func.args.posonlyargs, *func.args.args, *func.args.kwonlyargs] if a.arg in MODULE_ARGS}
    for node in ast.walk(func):
        if isinstance(node, ast.Assign):
            values = node.value.elts if isinstance(node.value, ast.Tuple) else [node.value]
            targets = node.targets[0].elts if isinstance(node.targets[0], ast.Tuple) else [node.targets[0]]
            for t, v in zip(targets, values) if len(targets) == len(values) else []:
                if _is_host(v, names, self_attrs) and isinstance(t, ast.Name):
                    names.add(t.id)
    return names


def _is_host(node: ast.AST, names: set[str], self_attrs: set[str]) -> bool:
    if isinstance(node, ast.Name):
        return node.id in names
    return isinstance(node, ast.Attribute) and isinstance(node.value, ast.Name) and node.value.id == "self" and node.attr in self_attrs


def _stored_on_self(cls: ast.ClassDef) -> set[str]:
    """``self`` attributes any method of ``cls`` assigns the module argument to."""
    attrs: set[str] = set()
    for func in [n for n in ast.walk(cls) if isinstance(n, (ast.FunctionDef, ast.AsyncFunctionDef))]:
        names = _aliases(func, set())
        for node in ast.walk(func):
            if isinstance(node, ast.Assign):
                values = node.value.elts if isinstance(node.value, ast.Tuple) else [node.value]
                targets = node.targets[0].elts if isinstance(node.targets[0], ast.Tuple) else [node.targets[0]]
                for t, v in zip(targets, values) if len(targets) == len(values) else []:
                    if _is_host(v, names, set()) and isinstance(t, ast.Attribute) and isinstance(t.value, ast.Name) and t.value.id == "self":
                        attrs.add(t.attr)
    return attrs


BATCH_CONTROLLERS = {"adaptive_batch.py"}
"""Callback files that steer the run (typed ``BatchHost``) rather than select: checked against that protocol."""


def forbidden_accesses(source: str, filename: str = "<source>", members: frozenset[str] | None = None) -> list[str]:
    """``file:line name`` of every access on a module argument that is not a member of the protocol (``SelectionHost``)."""
    members, out = host_members() if members is None else members, []
    tree = ast.parse(source, filename)
    classes = [n for n in ast.walk(tree) if isinstance(n, ast.ClassDef)]
    owner = {id(f): c for c in classes for f in ast.walk(c) if isinstance(f, (ast.FunctionDef, ast.AsyncFunctionDef))}
    stored = {id(c): _stored_on_self(c) for c in classes}
    for func in [n for n in ast.walk(tree) if isinstance(n, (ast.FunctionDef, ast.AsyncFunctionDef))]:
        self_attrs = stored.get(id(owner.get(id(func))), set())
        names = _aliases(func, self_attrs)
        for node in ast.walk(func):
            if isinstance(node, ast.Attribute) and _is_host(node.value, names, self_attrs) and node.attr not in members:
                out.append(f"{filename}:{node.lineno} .{node.attr}")
            if (
                isinstance(node, ast.Call) and isinstance(node.func, ast.Name) and node.func.id in ("getattr", "hasattr")
                and len(node.args) >= 2 and _is_host(node.args[0], names, self_attrs)
                and isinstance(node.args[1], ast.Constant) and node.args[1].value not in members
            ):
                out.append(f"{filename}:{node.lineno} {node.func.id}(..., {node.args[1].value!r})")
    return sorted(set(out))


def test_callbacks_read_only_the_selection_host():
    found = [hit for path in sorted(CALLBACKS.glob("*.py")) if path.name not in BATCH_CONTROLLERS
             for hit in forbidden_accesses(path.read_text(), path.name)]
    assert found == [], f"callbacks read module attributes outside SelectionHost ({sorted(host_members())}): {found}"


def test_a_batch_controller_reads_only_the_batch_host():
    found = [hit for name in sorted(BATCH_CONTROLLERS)
             for hit in forbidden_accesses((CALLBACKS / name).read_text(), name, batch_host_members())]
    assert found == [], f"a batch controller reads module attributes outside BatchHost ({sorted(batch_host_members())}): {found}"
    assert forbidden_accesses("def f(pl_module):\n    pl_module.updater.noise_meter\n", "x.py", batch_host_members()) == ["x.py:2 .updater"]


def test_the_checker_catches_direct_aliased_stored_and_getattr_accesses():
    source = '''
class Method:
    def setup_selection(self, trainer, pl_module, selectors):
        self._trainer, self._kept = trainer, pl_module
        pl_module.rollout_settings.max_new_tokens  # a member: fine

    def prune(self, partial):
        return self._kept.policy(partial)

    def on_train_batch_start(self, trainer, pl_module, batch, batch_idx):
        m = pl_module
        step = int(pl_module.steps_done) + getattr(m, "seed", 0)
        m.tokenizer.pad_token_id
        pl_module.render_prompt([])  # a member: fine
'''
    assert forbidden_accesses(source) == [
        "<source>:12 .steps_done",
        "<source>:12 getattr(..., 'seed')",
        "<source>:13 .tokenizer",
        "<source>:8 .policy",
    ]


def test_the_protocol_is_short_and_names_what_methods_ask_for():
    assert host_members() == {
        "accuracy_reward", "rollout_settings", "group_size", "hidden_size", "lockstep", "render_prompt",
        "generate_and_score", "completion_logprobs", "last_hidden_states",
    }


def test_grpo_module_and_the_simulators_module_have_every_member_without_subclassing():
    from lit_rlvr.bench.sim import SimModule
    from lit_rlvr.bench.sim.config import SimConfig
    from lit_rlvr.bench.sim.policy import SimPolicy
    from lit_rlvr.module import GRPOModule

    sim_module = SimModule(SimPolicy(SimConfig(num_prompts=10, num_val=2), seed=0), group_size=4, seed=0)
    for module in (GRPOModule(), sim_module):
        assert SelectionHost not in type(module).__mro__
        missing = sorted(name for name in host_members() if not hasattr(module, name))
        assert missing == [], f"{type(module).__name__} lacks {missing}"
    grpo = GRPOModule()
    missing = sorted(name for name in batch_host_members() if not hasattr(grpo, name))
    assert missing == [], f"GRPOModule lacks BatchHost's {missing}"
    assert sim_module.hidden_size == 0 and sim_module.lockstep is False  # no policy: ARRoL's head reads engine states
    assert sim_module.render_prompt([{"role": "user", "content": "sim 7"}]) == [7]
    assert sim_module.accuracy_reward == "accuracy"
