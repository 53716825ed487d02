"""``coevolve plan``'s text: model, device, per-phase work and time, per-role memory, per-phase
peak, the layout's per-GPU table, the verdict with the fields to change, and the rates used."""

from __future__ import annotations

from typing import TYPE_CHECKING

from coevolve.plan.devices import GiB
from coevolve.plan.memory import SAFETY_MARGIN
from coevolve.plan.timing import COMPLETION_FILL

if TYPE_CHECKING:
    from coevolve.plan.estimate import Plan


def format_layout(plan: Plan) -> str:
    """The layout section of ``format_plan``: per-GPU peak and headroom per phase, the verdict,
    wall time, and which figures are a model and which were measured."""
    lp = plan.layout
    assert lp is not None
    gib = lambda x: f"{x / GiB:6.1f}"  # noqa: E731
    kinds = [k for k in ("GPU 0", "actor GPU", "verl GPU") if any(k in p.gpus for p in lp.phases)]
    L = [
        f"layout: {lp.layout.describe()}",
        f"per-GPU peak per phase, GiB ({plan.device.name}, {plan.device.memory_gib.value:g} GiB per GPU; "
        f"{SAFETY_MARGIN:.0%} headroom required)",
    ]
    L.append(
        "  " + f"{'phase':<11}" + "".join(f"{k:>11}" for k in kinds) + f"{'peak':>8}{'headroom':>9}"
        f"{'generate':>10}{'learn':>9}{'overhead':>9}"
    )
    tot = [0.0, 0.0, 0.0]
    for p in lp.phases:
        head = 1 - p.peak / plan.capacity
        flag = "" if p.peak <= plan.limit else "  <-- does not fit"
        L.append(
            "  "
            + f"{p.name:<11}"
            + "".join(f"{gib(p.gpus[k]) if k in p.gpus else '-':>11}" for k in kinds)
            + f"{gib(p.peak):>8}{head:>9.0%}{_fmt_s(p.gen_seconds):>10}{_fmt_s(p.train_seconds):>9}"
            f"{_fmt_s(p.overhead_seconds):>9}{flag}"
        )
        tot[0] += p.gen_seconds
        tot[1] += p.train_seconds
        tot[2] += p.overhead_seconds
    L.append(
        f"  {'total':<11}" + " " * (11 * len(kinds) + 17) + f"{_fmt_s(tot[0]):>10}{_fmt_s(tot[1]):>9}"
        f"{_fmt_s(tot[2]):>9}  = {_fmt_s(sum(tot))} (grading and I/O not counted)"
    )
    if lp.verl is not None:
        v = lp.verl
        L.append(
            f"  verl GPU (largest GRPO phase): params {v.params / GiB:.1f} + grads {v.grads / GiB:.1f} + optimizer "
            f"{v.optimizer / GiB:.1f} + ref {v.ref / GiB:.1f} + gathered units {v.gathered / GiB:.1f} + "
            f"activations/logits {v.activations / GiB:.1f} = train {v.train_peak / GiB:.1f}; rollout "
            f"{v.rollout_peak / GiB:.1f} (vLLM {v.rollout / GiB:.1f})"
        )
    L.append("scaling assumptions:")
    L.extend(f"  - {a}" for a in lp.assumptions)
    return "\n".join(L)


def _fmt_s(sec: float) -> str:
    if sec < 120:
        return f"{sec:.0f} s"
    if sec < 7200:
        return f"{sec / 60:.0f} min"
    return f"{sec / 3600:.1f} h"


def _fmt_n(x: float) -> str:
    for unit, div in (("G", 1e9), ("M", 1e6), ("k", 1e3)):
        if abs(x) >= div:
            return f"{x / div:.1f}{unit}"
    return f"{x:.0f}"


def format_plan(plan: Plan) -> str:
    """The plan as text: model, device, per-phase work and time, per-role memory, per-phase peak,
    verdict with the fields to change, and the rates used."""
    L = _header(plan) + [""] + _work_table(plan) + [""] + _memory_tables(plan) + [""]
    if plan.layout is not None:
        L += [format_layout(plan), ""]
    L += _verdict(plan) + [""] + _rates(plan)
    return "\n".join(L)


def _header(plan: Plan) -> list[str]:
    s, d = plan.shape, plan.device
    any_role = next(iter(plan.roles.values()))
    return [
        f"plan: {plan.recipe} on {d.name} ({d.memory_gib.value:g} GiB; {SAFETY_MARGIN:.0%} headroom required)",
        f"model: {plan.model}: {s.model_type}, {s.n_params / 1e9:.3f}B params, {s.layers} layers, hidden {s.hidden}, "
        f"{s.heads}/{s.kv_heads} heads x {s.head_dim}, vocab {s.vocab}, {'tied' if s.tied else 'untied'}; "
        f"weights {'bf16' if plan.dtype_bytes == 2 else 'fp32'}",
        f"learner: {'LoRA ' + _fmt_n(any_role.trainable) + ' trainable' if any_role.trainable < s.n_params else 'full fine-tune'}, "
        f"checkpointing {'on' if any_role.checkpointing else 'off'}, log-prob chunk "
        f"{any_role.chunk or 'off (full logits)'}, largest micro-batch {any_role.micro_batch_rows} rows / "
        f"{any_role.micro_batch_tokens} tokens",
    ]


def _work_table(plan: Plan) -> list[str]:
    L = [
        "work (caps: every completion at its limit; tokens at the assumed mean of "
        f"{COMPLETION_FILL:.0%} of the cap; times from the rates below)",
        f"  {'phase':<11}{'runs':>5}{'rollouts':>10}{'gen tokens':>12}{'train tokens':>14}{'generate':>10}{'learn':>9}  what",
    ]
    tot = [0.0] * 5
    for e in plan.phases:
        w = e.work
        what = "; ".join(f"{g.role}: {g.what} ({g.max_new} max)" for g in w.gens) + (f"  [{w.note}]" if w.note else "")
        L.append(
            f"  {w.name:<11}{w.times:>5}{_fmt_n(w.rollouts):>10}{_fmt_n(e.gen_tokens):>12}{_fmt_n(e.train_tokens):>14}"
            f"{_fmt_s(e.gen_seconds):>10}{_fmt_s(e.train_seconds):>9}  {what}"
        )
        for i, v in enumerate((w.rollouts, e.gen_tokens, e.train_tokens, e.gen_seconds, e.train_seconds)):
            tot[i] += v
    L.append(
        f"  {'total':<11}{'':>5}{_fmt_n(tot[0]):>10}{_fmt_n(tot[1]):>12}{_fmt_n(tot[2]):>14}{_fmt_s(tot[3]):>10}"
        f"{_fmt_s(tot[4]):>9}  = {_fmt_s(tot[3] + tot[4])} (grading and I/O not counted)"
    )
    return L


def _memory_tables(plan: Plan) -> list[str]:
    gib = lambda x: f"{x / GiB:6.1f}"  # noqa: E731
    L = [
        "memory per role, GiB (training peak = weights + masters + optimizer + grads + max(activations + logits, "
        "optimizer-step temporaries))",
        f"  {'role':<12}{'weights':>8}{'masters':>8}{'optim':>8}{'grads':>8}{'activ':>8}{'logits':>8}{'optstep':>8}"
        f"{'train peak':>11}{'KV (call)':>10}",
    ]
    for name, rm in plan.roles.items():
        L.append(
            f"  {name:<12}{gib(rm.weights):>8}{gib(rm.masters):>8}{gib(rm.optimizer):>8}{gib(rm.grads):>8}"
            f"{gib(rm.activations):>8}{gib(rm.logits):>8}{gib(rm.opt_step):>8}{gib(rm.train_peak):>11}{gib(rm.kv):>10}"
        )
    L += [
        "",
        "peak per phase, GiB (resident: weights of the roles on the GPU + the training role's state)"
        + ("; one GPU, the reference of the layout below" if plan.layout is not None else ""),
        f"  {'phase':<11}{'resident':>9}{'transient':>10}{'peak':>8}{'headroom':>9}  largest transient",
    ]
    for e in plan.phases:
        head = 1 - e.peak / plan.capacity
        flag = "" if e.peak <= plan.limit else "  <-- does not fit"
        L.append(
            f"  {e.work.name:<11}{gib(e.resident):>9}{gib(e.transient):>10}{gib(e.peak):>8}{head:>9.0%}  "
            f"{e.transient_what}{flag}"
        )
    if plan.host_bytes:
        L.append(f"  host memory for offloaded state / parked weights: up to {plan.host_bytes / GiB:.1f} GiB")
    return L


def _verdict(plan: Plan) -> list[str]:
    if plan.fits and plan.layout is not None:
        worst_l = max(plan.layout.phases, key=lambda p: p.peak)
        L = [
            f"verdict: fits on the layout (largest per-GPU peak {worst_l.peak / GiB:.1f} GiB in phase "
            f"{worst_l.name} on {worst_l.where}, headroom {1 - worst_l.peak / plan.capacity:.0%})"
        ]
    elif plan.fits:
        worst = max(plan.phases, key=lambda e: e.peak)
        L = [
            f"verdict: fits (largest peak {worst.peak / GiB:.1f} GiB in phase {worst.work.name}, "
            f"headroom {1 - worst.peak / plan.capacity:.0%})"
        ]
    else:
        L = ["verdict: DOES NOT FIT"] + [f"  - {p}" for p in plan.problems]
    return L + [f"note: {n}" for n in plan.notes]


def _rates(plan: Plan) -> list[str]:
    d = plan.device
    L = [f"rates ({d.name}; * = measured, - = assumed):"]
    for label, r in (
        ("memory GiB", d.memory_gib),
        ("matmul TFLOP/s", d.matmul_tflops),
        ("train MFU", d.train_mfu),
        ("memory GB/s", d.mem_gbps),
        ("HF decode ms/step/layer", d.hf_step_ms_per_layer),
        *(() if d.decode_tflops is None else (("HF decode TFLOP/s", d.decode_tflops),)),
        *(() if d.fp32_tflops is None else (("fp32 matmul TFLOP/s", d.fp32_tflops),)),
        *((("learn us/token/layer", d.learn_us_per_token_layer),) if d.learn_us_per_token_layer.value else ()),
        *((("HF decode us/row/step", d.hf_us_per_row_step),) if d.hf_us_per_row_step.value else ()),
    ):
        L.append(f"  {'*' if r.measured else '-'} {label:<24}{r.value:>10.4g}  {r.source}")
    return L
