"""Forward and backward hooks on a submodule, as advice: ``weave(model.encoder, ...)``.

Weaving an ``nn.Module`` instance uses torch's own module hooks (forward pre-hook, forward
hook, full backward hook), so it also works on a model under ``torch.compile``. Here:

* ``before=`` / ``after=`` functions watch the encoder's input and output on every forward
  and share ``ctx.data`` within one call (the activation statistics of each batch);
* an aspect's ``after_backward`` method, woven into the head, sees torch's
  ``grad_output`` as ``ctx.args`` and ``grad_input`` as ``ctx.result``: the gradient
  that flows back into the encoder's output;
* ``describe()`` shows the ``encoder.forward`` / ``head.backward`` join points, and
  removing the handles removes every torch hook again.

(A backward stage is woven into the head, not the encoder: torch warns about backward
hooks on a module none of whose inputs require gradients, such as a first layer.)

Run: ``python examples/forward_hook.py``.
"""

from __future__ import annotations

import torch

import aspecthook as ah


class Net(torch.nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.encoder = torch.nn.Sequential(torch.nn.Linear(10, 32), torch.nn.ReLU())
        self.head = torch.nn.Linear(32, 2)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        out: torch.Tensor = self.head(self.encoder(x))
        return out


class GradientProbe(ah.Aspect):
    """Records the norm of the gradient the woven module passes back to its input."""

    def __init__(self) -> None:
        super().__init__()
        self.norms: list[float] = []

    def after_backward(self, ctx: ah.CallContext) -> None:
        grad_input = ctx.result[0]
        self.norms.append(float(grad_input.norm()))


def main() -> None:
    torch.manual_seed(0)
    model = Net()
    optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
    x, y = torch.randn(64, 10), torch.randint(0, 2, (64,))
    # Fraction of ReLU units active, per forward, relative to the input's spread. The
    # advice keeps to tensor operations (no .item() / float()), so under torch.compile it
    # is traced into the graph instead of breaking it.
    active: list[torch.Tensor] = []

    def input_scale(ctx: ah.CallContext) -> None:
        ctx.data["input_std"] = ctx.args[0].detach().std()

    def activations(ctx: ah.CallContext) -> None:
        fraction = (ctx.result.detach() > 0).float().mean()
        active.append(fraction / ctx.data["input_std"])  # the before advice's context

    probe = GradientProbe()
    encoder = ah.weave(model.encoder, before=input_scale, after=activations, name="encoder")
    head = ah.weave(model.head, probe, name="head")
    print(ah.describe(ah.Glob("encoder.*") | ah.Glob("head.*")))

    for _ in range(5):
        optimizer.zero_grad()
        torch.autograd.backward(torch.nn.functional.cross_entropy(model(x), y))
        optimizer.step()
    print(f"\nactive units / input std per step: {[round(float(a), 3) for a in active]}")
    print(f"gradient norm at the encoder output: {[round(n, 4) for n in probe.norms]}")

    # The forward advice runs inside a compiled model too (backend='eager' keeps this
    # example quick; Dynamo traces the hooks either way).
    head.remove()
    compiled = torch.compile(model, backend="eager")
    compiled(x)
    print(f"after one compiled forward: {len(active)} forwards observed")

    encoder.remove()
    assert not model.encoder._forward_hooks
    assert not model.head._backward_hooks
    print("unwoven: the encoder has no hooks left")


if __name__ == "__main__":
    main()
