"""weave(module, ...) on an nn.Module instance runs advice through torch's own hooks."""

from __future__ import annotations

import copy
import gc
import sys
import types
import weakref
from collections.abc import Iterator
from typing import Any

import pytest
import torch

import aspecthook as ah
from aspecthook.errors import UnsupportedAdviceError, WeaveTargetError
from aspecthook.train import Runner

HOOK_DICTS = (
    "_forward_pre_hooks",
    "_forward_pre_hooks_with_kwargs",
    "_forward_hooks",
    "_forward_hooks_with_kwargs",
    "_forward_hooks_always_called",
    "_backward_pre_hooks",
    "_backward_hooks",
)


def _model() -> torch.nn.Sequential:
    torch.manual_seed(0)
    return torch.nn.Sequential(torch.nn.Linear(4, 8), torch.nn.ReLU(), torch.nn.Linear(8, 2))


def _hooks(module: torch.nn.Module) -> dict[str, int]:
    """How many entries each of the module's torch hook dicts holds (only non-empty ones)."""
    counts = {name: len(getattr(module, name)) for name in HOOK_DICTS}
    return {name: n for name, n in counts.items() if n}


@pytest.fixture(autouse=True)
def _one_thread() -> Iterator[None]:
    before = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(before)


def test_before_and_after_see_and_change_inputs_and_outputs() -> None:
    """before edits ctx.args (the pre-hook returns them), after replaces ctx.result."""
    model = _model()
    x = torch.randn(3, 4)
    expected = model[2](model[1](model[0](x * 0) + 1)) * 10
    seen: list[Any] = []

    def double_zero(ctx: ah.CallContext) -> None:
        seen.append((ctx.instance, ctx.target, ctx.args[0].shape))
        ctx.args[0] = ctx.args[0] * 0

    def plus_one(ctx: ah.CallContext) -> None:
        ctx.result = ctx.result + 1

    with (
        ah.weave(model[0], before=double_zero, after=plus_one),
        ah.weave(model[2], after=lambda ctx: setattr(ctx, "result", ctx.result * 10)),
    ):
        out = model(x)
    assert torch.allclose(out, expected)
    assert seen == [(model[0], model[0], (3, 4))]
    assert torch.allclose(model(x), model[2](model[1](model[0](x))))  # unwoven again


def test_keyword_arguments_of_forward_are_seen_and_editable() -> None:
    """ctx.kwargs holds forward's keyword arguments; a new value reaches forward."""

    class Scale(torch.nn.Module):
        def forward(self, x: torch.Tensor, *, factor: float = 1.0) -> torch.Tensor:
            return x * factor

    module = Scale()
    with ah.weave(module, before=lambda ctx: ctx.kwargs.update(factor=3.0)):
        assert module(torch.ones(2), factor=2.0).tolist() == [3.0, 3.0]


def test_before_and_after_of_one_forward_call_share_the_context() -> None:
    """ctx.data set before forward is there after it, per call, nested calls included."""
    module = torch.nn.Linear(2, 2)
    starts: list[int] = []
    pairs: list[tuple[int, int]] = []

    def start(ctx: ah.CallContext) -> None:
        ctx.data["n"] = len(starts)
        starts.append(ctx.data["n"])
        if len(starts) == 1:
            module(torch.ones(1, 2))  # a nested call of the same module

    def end(ctx: ah.CallContext) -> None:
        pairs.append((ctx.data["n"], ctx.result.shape[0]))

    with ah.weave(module, before=start, after=end):
        module(torch.ones(3, 2))
    assert pairs == [(1, 1), (0, 3)]


def test_backward_advice_sees_grad_output_and_can_replace_grads() -> None:
    """after_backward: ctx.args is grad_output, ctx.result grad_input (replaceable)."""
    model = _model()
    x = torch.randn(3, 4, requires_grad=True)
    seen: dict[str, Any] = {}

    class Grads(ah.Aspect):
        def before_backward(self, ctx: ah.CallContext) -> None:
            seen["before"] = ctx.args[0].clone()

        def after_backward(self, ctx: ah.CallContext) -> None:
            seen["after"] = ctx.args[0].clone()
            seen["grad_input"] = ctx.result[0].clone()
            ctx.result = (torch.zeros_like(ctx.result[0]),)

    with ah.weave(model[2], Grads()):
        model(x).sum().backward()
    assert torch.equal(seen["before"], torch.ones(3, 2))  # d(sum)/d(output)
    assert torch.equal(seen["after"], torch.ones(3, 2))
    assert torch.allclose(seen["grad_input"], torch.ones(3, 2) @ model[2].weight)
    assert x.grad is not None
    assert torch.equal(x.grad, torch.zeros(3, 4))


def test_before_backward_can_scale_grad_output() -> None:
    """Assigning ctx.args in before_backward replaces the gradient flowing into the module."""
    model = _model()
    x = torch.randn(3, 4)
    model(x).sum().backward()
    plain = model[0].weight.grad.clone()  # type: ignore[union-attr]
    model.zero_grad()

    def halve(ctx: ah.CallContext) -> None:
        ctx.args = [g * 0.5 for g in ctx.args]

    class Halve(ah.Aspect):
        before_backward = staticmethod(halve)

    with ah.weave(model[2], Halve()):
        model(x).sum().backward()
    assert torch.allclose(model[0].weight.grad, plain * 0.5)  # type: ignore[arg-type]


def test_removing_the_handle_removes_the_torch_hooks() -> None:
    """handle.remove() leaves the module's hook dicts as they were; twice is a no-op."""
    model = _model()

    class Both(ah.Aspect):
        def after_forward(self, ctx: ah.CallContext) -> None:
            pass

        def before_backward(self, ctx: ah.CallContext) -> None:
            pass

        def after_backward(self, ctx: ah.CallContext) -> None:
            pass

    handle = ah.weave(model[0], Both(), before=lambda ctx: None)
    assert _hooks(model[0]) == {
        "_forward_pre_hooks": 1,
        "_forward_pre_hooks_with_kwargs": 1,
        "_forward_hooks": 2,
        "_forward_hooks_with_kwargs": 2,
        "_forward_hooks_always_called": 1,
        "_backward_pre_hooks": 1,
        "_backward_hooks": 1,
    }
    handle.remove()
    assert _hooks(model[0]) == {}
    handle.remove()
    assert not [jp for jp in ah.describe() if "Linear" in jp.joinpoint]


def test_removing_backward_advice_lets_the_module_take_an_old_style_backward_hook() -> None:
    """Torch marks a module with a full backward hook (_is_full_backward_hook) and then
    refuses register_backward_hook on it: removal puts the mark back as it was."""
    module = torch.nn.Linear(2, 2)
    with ah.weave(module, name="lin"), ah.after("lin.backward")(lambda ctx: None):
        module(torch.randn(1, 2, requires_grad=True)).sum().backward()
    assert module._is_full_backward_hook is None
    module.register_backward_hook(lambda *args: None)


@pytest.mark.filterwarnings("ignore:Using a non-full backward hook:FutureWarning")
def test_backward_advice_on_a_module_with_an_old_style_hook_is_shown_failed() -> None:
    """A module with a register_backward_hook hook cannot also take the full backward hook
    that after-backward advice needs: the advice is failed in describe(), the user's hook
    keeps running, and registering it raises nothing (it was torch's RuntimeError)."""
    module = torch.nn.Linear(2, 2)
    theirs: list[int] = []
    module.register_backward_hook(lambda *args: theirs.append(1))
    ours: list[int] = []
    with ah.weave(module, name="lin"), ah.after("lin.backward")(lambda ctx: ours.append(1)):
        module(torch.randn(1, 2, requires_grad=True)).sum().backward()
        rows = [r for r in ah.describe() if r.joinpoint == "lin.backward" and r.stage == "after"]
    assert [r.status for r in rows] == ["failed"]
    assert "register_full_backward_hook" in rows[0].note
    assert (theirs, ours) == ([1], [])


def test_hooks_are_installed_only_for_stages_with_advice() -> None:
    """Forward advice alone adds no backward hook (which would wrap inputs and outputs)."""
    module = torch.nn.Linear(2, 2)
    with ah.weave(module, after=lambda ctx: None):
        assert "_backward_hooks" not in _hooks(module)
        assert "_backward_pre_hooks" not in _hooks(module)
    with ah.weave(module, name="probe"):
        assert _hooks(module) == {}


def test_weaving_one_module_twice_shares_one_set_of_hooks() -> None:
    """Two weaves of a module run through the same hooks; each removal takes its advice."""
    module = torch.nn.Linear(2, 2)
    calls: list[str] = []
    first = ah.weave(module, before=lambda ctx: calls.append("first"))
    second = ah.weave(module, before=lambda ctx: calls.append("second"))
    assert len(module._forward_pre_hooks) == 1
    module(torch.ones(1, 2))
    first.remove()
    module(torch.ones(1, 2))
    assert calls == ["first", "second", "second"]
    second.remove()
    assert _hooks(module) == {}


def test_named_join_points_take_advice_registered_later() -> None:
    """weave(module, name='head') makes 'head.forward' / 'head.backward' for any advice."""
    model = _model()
    grads: list[torch.Size] = []
    with ah.weave(model[2], name="head"):
        assert _hooks(model[2]) == {}
        advice = ah.after("head.backward")(lambda ctx: grads.append(ctx.args[0].shape))
        model(torch.randn(5, 4)).sum().backward()
        advice.remove()
        assert _hooks(model[2]) == {}
    assert grads == [torch.Size([5, 2])]


def test_around_and_on_error_are_refused_with_the_way_out() -> None:
    """Torch hooks cannot wrap a call: around/on_error name weave(module.forward, ...)."""
    module = torch.nn.Linear(2, 2)
    with pytest.raises(UnsupportedAdviceError, match=r"weave\(module.forward, around=") as info:
        ah.weave(module, around=lambda ctx, proceed: proceed())
    assert info.value.kind == "around"
    assert isinstance(info.value, TypeError)

    class Catch(ah.Aspect):
        def on_error_forward(self, ctx: ah.CallContext) -> None:
            pass

    with pytest.raises(UnsupportedAdviceError, match=r"Linear\.forward', on_error="):
        ah.weave(module, Catch())
    assert _hooks(module) == {}
    assert not ah.default_weaver.registered


def test_an_aspect_of_around_advice_is_told_to_weave_the_method_whole() -> None:
    """weave(module, Timed()) names weave(module.forward, Timed(...)), the call that works,
    not a keyword (around=...) the aspect's user has no function for."""
    from aspecthook.aspects import Timed

    module = torch.nn.Linear(2, 2)
    with pytest.raises(UnsupportedAdviceError, match=r"weave\(module\.forward, Timed\(\.\.\.\)\)"):
        ah.weave(module, Timed())
    assert _hooks(module) == {}
    timed = Timed()
    with ah.weave(module.forward, timed):
        module(torch.randn(3, 2))
    assert [row.count for row in timed.summary()] == [1]


def test_the_suggested_method_weave_does_run_around_advice() -> None:
    """weave(module.forward, around=...) wraps that instance's forward (the documented fix)."""
    module = torch.nn.Linear(2, 2)
    with ah.weave(module.forward, around=lambda ctx, proceed: proceed() * 0):
        assert torch.equal(module(torch.ones(1, 2)), torch.zeros(1, 2))
    assert "forward" not in vars(module)


def test_skip_is_refused_at_the_call() -> None:
    """ctx.skip() cannot stop a hooked forward; it raises instead of being ignored."""
    module = torch.nn.Linear(2, 2)
    with (
        ah.weave(module, before=lambda ctx: ctx.skip(None)),
        pytest.raises(UnsupportedAdviceError, match="cannot skip"),
    ):
        module(torch.ones(1, 2))


def test_around_advice_reaching_a_module_by_glob_is_shown_failed_and_not_run() -> None:
    """A registered around advice that matches a module join point never runs there."""
    module = torch.nn.Linear(2, 2)
    ran: list[str] = []
    with ah.weave(module, name="lin", after=lambda ctx: ran.append("after")):
        advice = ah.around("lin.*")(lambda ctx, proceed: ran.append("around") or proceed())
        module(torch.ones(1, 2))
        rows = ah.describe("lin.forward")
        advice.remove()
    assert ran == ["after"]
    around = [r for r in rows if r.stage == "around"]
    assert around
    assert around[0].status == "failed"
    assert "torch module hooks" in around[0].note


def test_a_container_without_forward_is_refused() -> None:
    """A ModuleList is never called, so its hooks never run: weaving it is an error that
    says to weave its modules, not a weave whose advice silently never runs."""
    from aspecthook.errors import WeaveTargetError

    layers = torch.nn.ModuleList([torch.nn.Linear(2, 2)])
    with pytest.raises(WeaveTargetError, match="Weave the modules it holds"):
        ah.weave(layers, before=lambda ctx: None)
    assert _hooks(layers) == {}
    assert not [row for row in ah.describe() if "ModuleList" in row.joinpoint]
    compiled = torch.compile(layers[0], backend="eager")  # its forward is set on the instance
    with ah.weave(compiled, before=lambda ctx: None):
        assert _hooks(compiled) != {}


@pytest.mark.filterwarnings("ignore:`torch.jit.script` is deprecated:DeprecationWarning")
def test_a_scripted_module_is_refused_and_leaves_nothing_behind() -> None:
    """A ScriptModule takes no Python hooks: weaving it says to weave the Python module; it
    raised torch's RuntimeError and left its backward join point in describe()."""
    from aspecthook.errors import WeaveTargetError

    scripted = torch.jit.script(torch.nn.Linear(2, 2))
    with pytest.raises(WeaveTargetError, match="Weave the Python module instead"):
        ah.weave(scripted, before=lambda ctx: None)
    assert not [row for row in ah.describe() if "Script" in row.joinpoint]


def test_a_weave_whose_hooks_fail_to_install_leaves_no_join_point(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """A torch hook refused mid-weave raises as it is, and neither join point stays."""
    module = torch.nn.Linear(2, 2)

    def refuse(*args: Any, **kwargs: Any) -> None:
        raise RuntimeError("no hooks here")

    monkeypatch.setattr(module, "register_forward_pre_hook", refuse)
    with pytest.raises(RuntimeError, match="no hooks here"):
        ah.weave(module, name="refusing", before=lambda ctx: None)
    assert not [row for row in ah.describe() if "refusing" in row.joinpoint]
    assert not [row for row in ah.describe() if "Linear" in row.joinpoint]


def test_describe_shows_the_module_join_points_and_their_advice() -> None:
    """describe() lists '<name>.forward' / '<name>.backward' with the advice per stage."""
    model = _model()

    def record(ctx: ah.CallContext) -> None:
        pass

    with ah.weave(model[2], before=record, name="head"):
        rows = ah.describe("head.*")
    assert rows.advice_names("head.forward", "before") == ["record"]
    assert [r.joinpoint for r in rows] == ["head.backward", "head.forward"]


def test_an_exception_in_forward_leaves_no_context_behind() -> None:
    """The always-called hook pops the shared context: a failed call's inputs are freed."""

    class Fails(torch.nn.Module):
        def forward(self, x: torch.Tensor) -> torch.Tensor:
            raise ValueError("bad input")

    module = Fails()
    x = torch.ones(2)
    ref = weakref.ref(x)
    with ah.weave(module, before=lambda ctx: None, after=lambda ctx: None):
        with pytest.raises(ValueError, match="bad input"):
            module(x)
        del x
        gc.collect()
        assert ref() is None


class _Interrupted(torch.nn.Module):
    """Raises KeyboardInterrupt (a Ctrl-C) from forward while ``interrupt`` is set."""

    interrupt = False

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        if self.interrupt:
            raise KeyboardInterrupt
        return x * 2


def test_an_interrupted_forward_frees_its_inputs_at_the_next_call() -> None:
    """Ctrl-C skips torch's always-called hook; the next call drops the stale context."""
    module = _Interrupted()
    x = torch.ones(2)
    ref = weakref.ref(x)
    with ah.weave(module, before=lambda ctx: None, after=lambda ctx: None):
        module.interrupt = True
        with pytest.raises(KeyboardInterrupt):
            module(x)
        module.interrupt = False
        del x
        module(torch.ones(1))
        gc.collect()
        assert ref() is None


def test_a_stale_context_is_kept_apart_from_a_live_outer_call() -> None:
    """After an interrupt, nested calls still pair each after with its own before."""
    module = _Interrupted()
    pairs: list[tuple[int, int]] = []

    def start(ctx: ah.CallContext) -> None:
        ctx.data["n"] = ctx.args[0].shape[0]
        if ctx.data["n"] == 3:
            module(torch.ones(1))  # a nested call of the same module

    def end(ctx: ah.CallContext) -> None:
        pairs.append((ctx.data["n"], ctx.result.shape[0]))

    with ah.weave(module, before=start, after=end):
        module.interrupt = True
        with pytest.raises(KeyboardInterrupt):
            module(torch.ones(5))
        module.interrupt = False
        module(torch.ones(3))
    assert pairs == [(1, 1), (3, 3)]


def test_a_deep_copy_called_inside_the_original_keeps_both_contexts() -> None:
    """A deep copy shares the original's hooks (documented); called inside the original's
    forward, its before advice took the original's context for a stale one and dropped
    it, so the original's after advice got a fresh context without its ctx.data."""

    class Outer(torch.nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.inner: torch.nn.Module | None = None

        def forward(self, x: torch.Tensor) -> torch.Tensor:
            return x if self.inner is None else x + self.inner(x)

    original = Outer()
    pairs: list[tuple[bool, bool]] = []

    def start(ctx: ah.CallContext) -> None:
        ctx.data["instance"] = ctx.instance

    def end(ctx: ah.CallContext) -> None:
        pairs.append((ctx.instance is original, ctx.data.get("instance") is ctx.instance))

    with ah.weave(original, before=start, after=end):
        original.inner = copy.deepcopy(original)
        original(torch.ones(2))
    assert pairs == [(False, True), (True, True)]


def test_a_woven_module_can_be_garbage_collected() -> None:
    """Weaving keeps no strong reference to the module; the handle then removes nothing."""
    module = torch.nn.Linear(2, 2)
    ref = weakref.ref(module)
    handle = ah.weave(module, before=lambda ctx: None)
    del module
    gc.collect()
    assert ref() is None
    handle.remove()


def test_options_apply_to_the_module_advice() -> None:
    """every= / errors='log' work as for any advice."""
    module = torch.nn.Linear(2, 2)
    calls: list[int] = []

    def fail(ctx: ah.CallContext) -> None:
        calls.append(1)
        raise RuntimeError("advice bug")

    with ah.weave(module, after=fail, every=2, errors="log"):
        for _ in range(4):
            module(torch.ones(1, 2))
    assert calls == [1, 1]


def test_runner_weaver_weaves_a_submodule_for_that_run() -> None:
    """runner.weaver.weave(model[0], ...) advises every forward of the run; describe shows it."""
    torch.manual_seed(0)
    model = _model()
    data = [(torch.randn(4, 4), torch.randint(0, 2, (4,))) for _ in range(3)]
    runner = Runner(
        model,
        torch.optim.SGD(model.parameters(), lr=0.1),
        data,
        loss_fn=torch.nn.functional.cross_entropy,
        max_epochs=2,
    )
    norms: list[float] = []
    runner.weaver.weave(
        model[0], after=lambda ctx: norms.append(ctx.result.norm().item()), name="encoder"
    )
    assert "encoder.forward" in {r.joinpoint for r in runner.describe()}
    runner.run()
    assert len(norms) == 6
    runner.close()
    assert _hooks(model[0]) == {}


def test_forward_advice_works_under_torch_compile() -> None:
    """A compiled model runs the submodule's advice, with the changed inputs and outputs.

    Uses backend='eager': Dynamo traces the module hooks (what this test is about) in about
    a second, where inductor needs over a minute of C++ compilation on this CPU machine.
    """
    model = _model()
    x = torch.randn(3, 4)
    expected = model[2](model[1](model[0](x * 2) + 1))
    shapes: list[tuple[int, ...]] = []

    def double(ctx: ah.CallContext) -> None:
        ctx.data["shape"] = tuple(ctx.args[0].shape)
        ctx.args[0] = ctx.args[0] * 2

    def plus_one(ctx: ah.CallContext) -> None:
        shapes.append(ctx.data["shape"])
        ctx.result = ctx.result + 1

    torch._dynamo.reset()
    with ah.weave(model[0], before=double, after=plus_one):
        compiled = torch.compile(model, backend="eager")
        first, second = compiled(x), compiled(x)
    assert torch.allclose(first, expected)
    assert torch.allclose(second, expected)
    assert shapes == [(3, 4), (3, 4)]
    torch._dynamo.reset()


def test_a_compiled_woven_model_compiles_once() -> None:
    """The forward hooks' per-thread stack exists before Dynamo reads it: it used to be
    made on a thread's first call, so the compiled graph's guard on its absence failed
    at the second call and every woven model was compiled twice."""
    from torch._dynamo.testing import CompileCounter

    model = _model()
    x = torch.randn(3, 4)

    def double(ctx: ah.CallContext) -> None:
        ctx.args[0] = ctx.args[0] * 2

    def plus_one(ctx: ah.CallContext) -> None:
        ctx.result = ctx.result + 1

    torch._dynamo.reset()
    counter = CompileCounter()
    with ah.weave(model[0], before=double, after=plus_one):
        compiled = torch.compile(model, backend=counter)
        outputs = [compiled(x) for _ in range(3)]
    assert counter.frame_count == 1
    assert all(torch.equal(out, outputs[0]) for out in outputs)
    torch._dynamo.reset()


# Where the graph breaks (every=, once=), Dynamo compiles the rest of the hook as a frame of
# its own and warns from inside its own tracing on its non-leaf tensor arguments (torch's).
@pytest.mark.filterwarnings("ignore:The .grad attribute of a Tensor that is not a leaf")
@pytest.mark.parametrize(
    ("options", "runs", "graphs"),
    [
        pytest.param({"rank": 0}, [True] * 4, 1, id="rank"),
        pytest.param({"when": lambda ctx: True}, [True] * 4, 1, id="when"),
        pytest.param({"every": 2}, [False, True, False, True], None, id="every"),
        pytest.param({"once": True}, [True, False, False, False], None, id="once"),
    ],
)
def test_filtered_module_advice_does_not_recompile_a_compiled_model(
    options: dict[str, Any], runs: list[bool], graphs: int | None
) -> None:
    """Advice with a filter runs on the calls it should in a compiled model, which later
    calls do not compile again. The filter counted every call and Dynamo guarded on the
    count: a new graph at every call, up to its recompile limit. rank= and when= count
    nothing now and stay in the one graph; every= and once= count in Python, where the
    graph breaks."""
    from torch._dynamo.testing import CompileCounter

    model = _model()
    x = torch.randn(3, 4)
    plain = model(x)

    def plus_one(ctx: ah.CallContext) -> None:
        ctx.result = ctx.result + 1

    torch._dynamo.reset()
    counter = CompileCounter()
    with ah.weave(model[2], after=plus_one, **options):
        compiled = torch.compile(model, backend=counter)
        outputs = [compiled(x)]
        first = counter.frame_count
        outputs += [compiled(x) for _ in runs[1:]]
    assert [not torch.allclose(out, plain) for out in outputs] == runs
    assert counter.frame_count == first
    assert graphs is None or first == graphs
    torch._dynamo.reset()


# Dynamo compiles the frames the woven call runs as frames of their own, and warns from
# inside its own tracing on their non-leaf tensor arguments (torch's, as below).
@pytest.mark.filterwarnings("ignore:The .grad attribute of a Tensor that is not a leaf")
def test_a_woven_method_runs_its_advice_under_torch_compile() -> None:
    """A method woven by its path (the way out this module's errors suggest) runs its
    advice in a compiled model, its call left out of the graph. Dynamo took the proxy for
    the function it wraps and traced that function's code: the advice never ran."""
    model = _model()
    x = torch.randn(3, 4)
    seen: list[tuple[int, ...]] = []

    def plus_one(ctx: ah.CallContext) -> None:
        seen.append(tuple(ctx.result.shape))
        ctx.result = ctx.result + 1

    torch._dynamo.reset()
    with ah.weave("torch.nn.ReLU.forward", after=plus_one):
        compiled = torch.compile(model, backend="eager")
        out = compiled(x)
    assert seen == [(3, 8)]
    assert torch.allclose(out, model[2](model[1](model[0](x)) + 1))
    torch._dynamo.reset()


# torch's Dynamo warns from inside its own tracing when a module with a full backward hook
# breaks the graph after a hook with side effects ran (reproducible with plain torch hooks,
# no aspecthook involved); the warning says nothing about this code.
@pytest.mark.filterwarnings("ignore:The .grad attribute of a Tensor that is not a leaf")
def test_backward_advice_works_under_torch_compile() -> None:
    """Backward advice on a submodule of a compiled model sees grad_output.

    Dynamo breaks the graph at a module with backward hooks (torch's rule unless compiled
    autograd is on), so the results are those of eager mode, which is what is checked.
    """
    model = _model()
    x = torch.randn(3, 4)
    grads: list[torch.Tensor] = []

    class Grads(ah.Aspect):
        def after_backward(self, ctx: ah.CallContext) -> None:
            grads.append(ctx.args[0])

    torch._dynamo.reset()
    with ah.weave(model[2], Grads()), ah.weave(model[0], after=lambda ctx: None):
        compiled = torch.compile(model, backend="eager")
        compiled(x).sum().backward()
    assert len(grads) == 1
    assert torch.equal(grads[0], torch.ones(3, 2))
    torch._dynamo.reset()


def test_a_woven_module_saves_whole_and_loads_without_the_weave(tmp_path: Any) -> None:
    """torch.save(model) of a woven model works (it used to fail on the hook closures);
    the loaded copy has no advice, as the weave belongs to this process, and a deep copy
    still runs the advice, as documented."""
    torch.manual_seed(0)
    model = torch.nn.Sequential(torch.nn.Linear(4, 4), torch.nn.ReLU(), torch.nn.Linear(4, 2))
    seen: list[str] = []
    x = torch.randn(3, 4)
    with ah.weave(model[0], name="first", before=lambda ctx: seen.append("before")):
        torch.save(model, tmp_path / "model.pt")
        copied = copy.deepcopy(model)
        copied(x)
        assert seen == ["before"]
    loaded = torch.load(tmp_path / "model.pt", weights_only=False)
    seen.clear()
    assert torch.equal(loaded(x), model(x))
    assert seen == []


def test_a_submodule_by_path_is_refused_and_the_model_left_as_it_was(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """'pkg.model.0' put a proxy among the model's submodules (``nn.Module.__setattr__``
    keeps it in ``_modules``), where removing the weave could not reach it: the model kept
    the proxy for good (``weave.unwrap_failed``). It is refused, saying to weave the
    submodule object or its forward by path, which works and comes off."""
    holder = types.ModuleType("_ah_model_holder")
    holder.model = _model()  # type: ignore[attr-defined]
    first = holder.model[0]  # type: ignore[attr-defined]
    monkeypatch.setitem(sys.modules, holder.__name__, holder)
    with pytest.raises(WeaveTargetError, match=r"weave the submodule object itself"):
        ah.weave("_ah_model_holder.model.0", before=lambda ctx: None)
    assert holder.model._modules["0"] is first  # type: ignore[attr-defined]
    assert ah.default_weaver.registered == []
    seen: list[str] = []
    with ah.woven("_ah_model_holder.model.0.forward", before=lambda ctx: seen.append("in")):
        holder.model(torch.randn(1, 4))  # type: ignore[attr-defined]
    assert seen == ["in"]
    assert "forward" not in vars(first)
