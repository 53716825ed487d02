"""fp32 gradient sums of half-precision parameters and who owns them: each parameter's gradient is
added into an fp32 sum as backward produces it (a post-accumulate-grad hook), and the hook's owner
is marked on the parameter so that a second learner cannot take the first one's gradients."""

from __future__ import annotations

import weakref
from typing import Any

from torch import Tensor

from coevolve.errors import ConfigError


class Fp32GradSum:
    """The fp32 sum of one half-precision parameter's gradients over a step's micro-batches, kept
    on the parameter's device. The learner moves it to the master once per step (``_take_grads``):
    for masters in CPU memory (``offload_optimizer``) that is one device-to-host copy per step
    instead of one per micro-batch, and no sum is ever taken on the CPU."""

    __slots__ = ("sum",)

    def __init__(self) -> None:
        self.sum: Tensor | None = None

    def add(self, g: Tensor) -> None:
        """Add ``g`` (any float dtype, on the parameter's device); a fresh tensor is taken over."""
        if self.sum is None:
            self.sum = g.detach().float()  # a fresh fp32 tensor (an fp32 ``g`` is taken as is: nobody else holds it)
        else:
            self.sum.add_(g.detach())


def fp32_accumulator(acc: Fp32GradSum) -> Any:
    """Post-accumulate-grad hook of a half-precision parameter: add its fresh gradient into the
    fp32 sum ``acc`` and free it, one parameter at a time. So the sum over micro-batches is taken
    in fp32, and at most one parameter's half gradient exists."""

    def hook(p: Tensor) -> None:
        g = p.grad
        if g is None:
            return
        acc.add(g)
        p.grad = None

    return hook


OWNER = "_coevolve_learner"
"""Attribute a half-precision parameter carries while a learner's gradient hook sits on it:
(weak reference to that learner, hook handle)."""


def remove_hooks(handles: list[Any]) -> None:
    for h in handles:
        h.remove()
    handles.clear()


def claim(names: list[str], params: list[Tensor]) -> None:
    """Refuse parameters another open learner hooks; clear hooks a dropped learner left."""
    for name, p in zip(names, params):
        prev = getattr(p, OWNER, None)
        if prev is None:
            continue
        owner = prev[0]()
        if owner is not None and not owner.closed:
            raise ConfigError(
                f"Learner: parameter {name} is already trained by another open Learner, whose "
                "gradient hooks would take every gradient of this one; call close() on that "
                "learner first (or use it as a context manager)"
            )
        prev[1].remove()
        delattr(p, OWNER)


def hook_params(owner: Any, params: list[Tensor], sums: list[Fp32GradSum], hooks: list[Any]) -> None:
    """Hook every parameter so that its gradients are summed in fp32 into its entry of ``sums``
    (``fp32_accumulator``), the handles into ``hooks``, and mark ``owner`` on it (weakly)."""
    me = weakref.ref(owner)
    for p, acc in zip(params, sums):
        h = p.register_post_accumulate_grad_hook(fp32_accumulator(acc))
        hooks.append(h)
        setattr(p, OWNER, (me, h))


def release(owner: Any, params: list[Tensor]) -> None:
    """Unmark the parameters ``owner`` holds (their hooks are removed by ``remove_hooks``)."""
    for p in params:
        prev = getattr(p, OWNER, None)
        if prev is not None and prev[0]() is owner:
            delattr(p, OWNER)
