"""A recipe's optimizer (sgd, adam, adamw) for the PyTorch trainers:
torch.optim's own update, called through its public functional form
(``torch.optim.sgd.sgd``, ``torch.optim.adam.adam``), with the state and the
``state_dict`` that torch.optim's classes keep, so a checkpoint holds what it
held when the trainers used those classes.

Why not the classes themselves: constructing any torch.optim optimizer, and
each of its steps, imports ``torch._dynamo`` (torch wraps ``add_param_group``
and ``step`` so that its compiler leaves them alone). That import is 2 to 3 s
of CPU in every training process on a small CPU machine, paid before the
first step, for a compiler that dawnpipe's training never calls. The
functional form is the arithmetic those classes run; tests/test_optimizers.py
holds this module to them step for step, bit for bit (with GradScaler too),
and state_dict for state_dict, and checks that building and stepping these
optimizers imports no compiler.

One parameter group, as the trainers build them; ``param_groups[0]["lr"]``
is set by the schedule before each step, as with torch.optim.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

import torch
from torch.optim.adam import adam
from torch.optim.sgd import sgd

# torch.optim's switches that dawnpipe leaves at their defaults: kept in the
# group only so that a state_dict has torch.optim's layout, and refused in a
# state_dict that sets them otherwise (this module implements the defaults alone).
FIXED = ("maximize", "foreach", "fused", "capturable", "differentiable", "amsgrad")


class _Optimizer:
    """What the trainers and GradScaler use of a torch.optim optimizer:
    ``param_groups``, ``state``, ``zero_grad``, ``step``, ``state_dict`` and
    ``load_state_dict``."""

    def __init__(self, params: Iterable[torch.Tensor], hyperparameters: dict[str, Any]):
        self.params = list(params)  # the one group's parameters, also param_groups[0]["params"]
        self.param_groups: list[dict[str, Any]] = [{"params": self.params, **hyperparameters}]
        self.state: dict[torch.Tensor, dict[str, Any]] = {}

    def zero_grad(self) -> None:
        for p in self.params:
            p.grad = None

    @torch.no_grad()
    def step(self) -> None:
        params = [p for p in self.params if p.grad is not None]
        self._update(self.param_groups[0], params, [p.grad for p in params])

    def _update(self, group: dict[str, Any], params: list[torch.Tensor], grads: list[torch.Tensor]) -> None:
        raise NotImplementedError

    def state_dict(self) -> dict[str, Any]:
        """torch.optim's layout: state and group keyed by the parameters' positions."""
        position = {id(p): i for i, p in enumerate(self.params)}
        group = {k: v for k, v in self.param_groups[0].items() if k != "params"}
        group["params"] = list(range(len(self.params)))
        return {"state": {position[id(p)]: state for p, state in self.state.items()}, "param_groups": [group]}

    def load_state_dict(self, state_dict: dict[str, Any]) -> None:
        """As torch.optim loads one: the saved hyperparameters, and each
        state tensor on its parameter's device and, but for ``step``, in its
        dtype. ValueError, and nothing changed, for a state_dict of other
        parameters or of a switch this module does not implement."""
        groups = state_dict["param_groups"]
        if len(groups) != 1 or len(groups[0]["params"]) != len(self.params):
            sizes = [len(g["params"]) for g in groups]
            raise ValueError(f"optimizer state for parameter groups of sizes {sizes}, this optimizer has one group of {len(self.params)}")
        group = self.param_groups[0]
        for key in FIXED:
            if key in groups[0] and key in group and groups[0][key] != group[key]:
                raise ValueError(f"optimizer state with {key} {groups[0][key]!r}; dawnpipe's optimizers implement {group[key]!r} only")
        strays = [position for position in state_dict["state"] if not (isinstance(position, int) and 0 <= position < len(self.params))]
        if strays:
            raise ValueError(f"optimizer state for parameters {strays}, this optimizer has parameters 0 to {len(self.params) - 1}")
        group.update({k: v for k, v in groups[0].items() if k != "params"})
        self.state = {}
        for position, saved in state_dict["state"].items():
            p = self.params[position]
            self.state[p] = {key: value if key == "step" or not torch.is_tensor(value) else _like(p, value) for key, value in saved.items()}


def _like(param: torch.Tensor, value: torch.Tensor) -> torch.Tensor:
    return value.to(dtype=param.dtype, device=param.device) if param.is_floating_point() else value.to(device=param.device)


class SGD(_Optimizer):
    """torch.optim.SGD(params, lr, momentum, nesterov=..., weight_decay=...)."""

    def __init__(self, params, *, lr: float, momentum: float, nesterov: bool, weight_decay: float):
        super().__init__(
            params,
            {
                "lr": lr,
                "momentum": momentum,
                "dampening": 0,
                "weight_decay": weight_decay,
                "nesterov": nesterov,
                "maximize": False,
                "foreach": None,
                "differentiable": False,
                "fused": None,
            },
        )

    def _update(self, group, params, grads) -> None:
        momentum = group["momentum"]
        buffers = [self.state.setdefault(p, {}).get("momentum_buffer") for p in params] if momentum != 0 else []
        sgd(
            params,
            grads,
            buffers,
            weight_decay=group["weight_decay"],
            momentum=momentum,
            lr=group["lr"],
            dampening=group["dampening"],
            nesterov=group["nesterov"],
            maximize=group["maximize"],
            has_sparse_grad=any(g.is_sparse for g in grads),
            foreach=group["foreach"],
            fused=group["fused"],
        )
        for p, buffer in zip(params, buffers):
            self.state[p]["momentum_buffer"] = buffer


class Adam(_Optimizer):
    """torch.optim.Adam, or with ``decoupled_weight_decay`` torch.optim.AdamW
    (params, lr, betas, weight_decay=...)."""

    def __init__(self, params, *, lr: float, betas: tuple[float, float], weight_decay: float, decoupled_weight_decay: bool):
        super().__init__(
            params,
            {
                "lr": lr,
                "betas": betas,
                "eps": 1e-8,
                "weight_decay": weight_decay,
                "amsgrad": False,
                "maximize": False,
                "foreach": None,
                "capturable": False,
                "differentiable": False,
                "fused": None,
                "decoupled_weight_decay": decoupled_weight_decay,
            },
        )

    def _update(self, group, params, grads) -> None:
        states = [self.state.setdefault(p, {}) for p in params]
        for p, state in zip(params, states):
            if not state:
                # torch.optim keeps the step count on the CPU, in the default float dtype's width
                state["step"] = torch.tensor(0.0, dtype=torch.float64 if torch.get_default_dtype() == torch.float64 else torch.float32, device="cpu")
                state["exp_avg"] = torch.zeros_like(p, memory_format=torch.preserve_format)
                state["exp_avg_sq"] = torch.zeros_like(p, memory_format=torch.preserve_format)
        beta1, beta2 = group["betas"]
        adam(
            params,
            grads,
            [s["exp_avg"] for s in states],
            [s["exp_avg_sq"] for s in states],
            [],
            [s["step"] for s in states],
            foreach=group["foreach"],
            capturable=group["capturable"],
            differentiable=group["differentiable"],
            fused=group["fused"],
            has_complex=any(torch.is_complex(p) for p in params),
            decoupled_weight_decay=group["decoupled_weight_decay"],
            amsgrad=group["amsgrad"],
            beta1=beta1,
            beta2=beta2,
            lr=group["lr"],
            weight_decay=group["weight_decay"],
            eps=group["eps"],
            maximize=group["maximize"],
        )
