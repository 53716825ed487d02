"""GRPO learner: one optimizer update from a batch of rollout groups.

The learner owns the optimizer and nothing else: it gets finished rollouts (token ids and
rewards per group) from the recipes, so sampling backend, reward and curriculum stay
independent of it. Design choices and why:

- zero-variance groups are dropped before the update (their tokens never enter the token-mean
  normaliser: the DAPO / TRL loss_type="dapo" / verl token-mean formulation);
- the token-mean normaliser is the *global* count of active completion tokens, so micro-batch
  size only trades memory for time and never changes the update;
- with half-precision models the optimizer keeps fp32 master weights (a 1e-6 update is far
  below half a bf16 ulp and would round away) and copies them back after each step; gradients
  are summed in fp32 on the model's device, one parameter at a time as backward produces it
  (``register_post_accumulate_grad_hook``), so no bf16 gradient survives a micro-batch and
  micro-batch sums are not rounded to bf16; the chunked LM head hands its fp32 weight gradient
  over directly (it never passes through bf16); the sums reach the masters once per step (one
  device-to-host copy when the masters live in CPU memory);
- non-finite loss or gradients raise ``NonFiniteLossError`` before any weight is touched.

Memory for 4B-8B models on one GPU (``coevolve plan`` estimates every term):
activation checkpointing (non-reentrant, works with LoRA; auto-on from 0.5B parameters),
token-budget micro-batches (``max_tokens_per_micro_batch``: rows sorted by length, packed
fully left-padded so a micro-batch costs rows x its longest row), chunked log-probs and entropy
(``logprob_chunk_tokens``: never a full (T, V) fp32 log-softmax), fused AdamW on CUDA, optional
optimizer state in CPU memory (``offload_optimizer``), and ``offload_state`` / ``onload_state``
so a role that is not training keeps only its weights on the GPU.
"""

from __future__ import annotations

import json
import weakref
from pathlib import Path
from typing import Any

import torch
from torch import Tensor

from coevolve.errors import CoevolveError, ConfigError, RunStateError
from coevolve.faults import fault_point
from coevolve.rl.batch import (
    UPDATE_FIGURES,
    Batch,
    RolloutGroup,
    Row,
    advantage_rows,
    collate,
    collate_shared,
    pack_micro_batches,
    pack_rows,
    step_metrics,
    validate_groups,
)
from coevolve.rl.grpo import _decoder_and_head, policy_loss, sequence_logprobs, shared_prompt_logprobs
from coevolve.rl.learner_config import (
    LearnerConfig,
    resolve_fused,
    resolve_gradient_checkpointing,
    resolve_logprob_chunk,
)
from coevolve.rl.precision import Fp32GradSum, claim, hook_params, release, remove_hooks

STATE_JSON = "learner_state.json"
OPTIM_FILE = "learner_optim.pt"


class NonFiniteLossError(CoevolveError):
    """The loss or the gradient became NaN/inf; the weights were left untouched."""


def _enable_checkpointing(model: Any) -> None:
    """Non-reentrant activation checkpointing of every decoder layer (the reentrant variant
    needs inputs that require grad, which a LoRA model's frozen embeddings do not give)."""
    kwargs = {"use_reentrant": False}
    try:
        if hasattr(model, "activation_checkpointing_enable"):  # transformers >= 5
            model.activation_checkpointing_enable(activation_checkpointing_kwargs=kwargs)
        elif hasattr(model, "gradient_checkpointing_enable"):
            model.gradient_checkpointing_enable(gradient_checkpointing_kwargs=kwargs)
        else:
            raise ValueError("no activation_checkpointing_enable / gradient_checkpointing_enable method")
    except ValueError as e:
        raise ConfigError(
            f"LearnerConfig.gradient_checkpointing: {type(model).__name__} does not support it ({e}); "
            "set learner.gradient_checkpointing=false"
        ) from None


def _wrap_lora(model: Any, cfg: LearnerConfig) -> Any:
    try:
        from peft import LoraConfig, get_peft_model
    except ImportError as e:
        raise ConfigError("learner.lora=true needs the 'lora' extra (peft): pip install 'coevolve[lora]'") from e
    lcfg = LoraConfig(
        r=cfg.lora_r,
        lora_alpha=cfg.lora_alpha,
        lora_dropout=cfg.lora_dropout,
        target_modules=cfg.lora_target_modules,
        task_type="CAUSAL_LM",
    )
    return get_peft_model(model, lcfg)


class Learner:
    """GRPO learner over a Hugging Face causal LM (shared in place with the sampler).

    With ``cfg.lora`` the model is wrapped with PEFT; use ``learner.model`` for sampling then.
    ``ref_model`` is needed only when ``cfg.beta_kl > 0`` (with LoRA the adapter-free base
    serves as reference when it is None).

    A learner over half-precision weights puts a gradient hook on every trainable parameter.
    ``close()`` (or leaving a ``with Learner(...)`` block, or dropping the learner) removes them
    and frees the masters and optimizer state; only then can another learner train the same
    model (building one while the first is open is a ``ConfigError``: the first one's hooks would
    take every gradient).
    """

    def __init__(
        self, model: Any, cfg: LearnerConfig | None = None, ref_model: Any = None, tokenizer: Any = None
    ) -> None:
        self.cfg = cfg or LearnerConfig()
        pad = getattr(tokenizer, "pad_token_id", None)
        self.pad_id = int(pad) if pad is not None else 0  # any id works: padded positions are masked
        model = self._prepare(model, ref_model)
        self.model = model
        self.ref_model = ref_model
        self.tokenizer = tokenizer
        if self.cfg.share_prompt and _decoder_and_head(model) is None:
            raise ConfigError(
                f"learner.share_prompt=true needs a plain decoder + LM head; {type(model).__name__} has "
                "none (set learner.share_prompt=false)"
            )
        named = [(n, p) for n, p in model.named_parameters() if p.requires_grad]
        if not named:
            raise ConfigError("Learner: the model has no trainable parameters")
        self.param_names = [n for n, _ in named]
        self.params = [p for _, p in named]
        self.device = self.params[0].device
        # where the masters and the optimizer state live when the learner is active
        self.state_device = torch.device("cpu") if self.cfg.offload_optimizer else self.device
        self._state_at = self.state_device  # where they are now (offload_state moves them)
        # fp32 master copies when the model holds half-precision weights
        self.master: list[Tensor] | None = None
        self._sums: list[Fp32GradSum] = []
        self._hooks: list[Any] = []
        self._head_sink: Any = None
        self.closed = False
        if any(p.dtype != torch.float32 for p in self.params):
            self._hook_fp32_masters(model)
        # a learner dropped without close() must not leave hooks that take the model's gradients
        self._finalizer = weakref.finalize(self, remove_hooks, self._hooks)
        self.optimizer = self._make_optimizer()
        self.step_count = 0
        self._lr_factor: Any = None  # the phase's schedule (begin_phase); None = cfg.lr throughout
        self.phase_step = 0  # optimizer steps taken in the phase, the schedule's argument

    def _prepare(self, model: Any, ref_model: Any) -> Any:
        """Activation checkpointing and the log-prob chunk resolved for ``model`` (before LoRA
        wrapping: PEFT forwards to the same layers), then the LoRA wrap; the settings they refuse."""
        n_params = sum(p.numel() for p in model.parameters())
        self.gradient_checkpointing = resolve_gradient_checkpointing(self.cfg, n_params)
        if self.gradient_checkpointing:
            _enable_checkpointing(model)
        if self.cfg.share_prompt and self.gradient_checkpointing:
            raise ConfigError(
                "learner.share_prompt=true runs completions on the prompt's KV cache, which activation "
                "checkpointing turns off: set learner.gradient_checkpointing=false (or share_prompt=false)"
            )
        vocab = getattr(getattr(model, "config", None), "vocab_size", None) or 0
        self.logprob_chunk = resolve_logprob_chunk(self.cfg, int(vocab))
        if self.cfg.lora:
            model = _wrap_lora(model, self.cfg)
        if self.cfg.beta_kl > 0 and ref_model is None and not self.cfg.lora:
            raise ConfigError("LearnerConfig.beta_kl > 0 needs a ref_model (or lora=True)")
        return model

    def _make_optimizer(self) -> torch.optim.Optimizer:
        """AdamW over the fp32 masters (half-precision weights) or the parameters themselves."""
        opt_params = self.master if self.master is not None else self.params
        if self.cfg.offload_optimizer and self.master is None and self.device.type != "cpu":
            raise ConfigError(
                "learner.offload_optimizer=true offloads the fp32 masters of half-precision weights, but the "
                f"trainable parameters here are fp32 on {self.device} (LoRA adapters, or model.dtype=float32); "
                "set learner.offload_optimizer=false"
            )
        self.fused = resolve_fused(self.cfg, self.state_device)
        extra = {"fused": True} if self.fused else {}
        return torch.optim.AdamW(
            opt_params, lr=self.cfg.lr, betas=self.cfg.betas, weight_decay=self.cfg.weight_decay, **extra
        )

    def begin_phase(self, updates: int, done: int = 0) -> None:
        """Start ``learner.lr_schedule`` for a GRPO phase of ``updates`` calls of ``step`` of which
        ``done`` are already taken (a continued or resumed phase): each call's optimizer steps get
        ``cfg.lr`` x transformers' schedule factor at their index in the phase. The factor is a pure
        function of that index, so a phase resumed at step k goes on exactly as if never stopped."""
        # transformers.optimization costs ~4 s to import; a config load (which imports this module) must not pay it
        from transformers.optimization import get_scheduler

        mu = self.cfg.epochs_per_batch
        name = "constant_with_warmup" if self.cfg.lr_schedule == "constant" else self.cfg.lr_schedule
        probe = torch.optim.SGD([torch.zeros(1, requires_grad=True)], lr=1.0)  # holds the schedule, never steps
        sched = get_scheduler(name, probe, num_warmup_steps=self.cfg.warmup_steps, num_training_steps=updates * mu)
        self._lr_factor = sched.lr_lambdas[0]
        self.phase_step = done * mu

    @property
    def current_lr(self) -> float:
        """The learning rate of the next optimizer step."""
        return self.cfg.lr * (1.0 if self._lr_factor is None else float(self._lr_factor(self.phase_step)))

    def _hook_fp32_masters(self, model: Any) -> None:
        """Set up fp32 training of half-precision weights (called once, from ``__init__``):
        claim the parameters (``precision.claim``), make their fp32 master copies in ``state_device``, and
        hook every parameter so that its gradients are summed in fp32 and its half gradient is
        freed at once (``fp32_accumulator``). With the chunked log-prob path the LM head's fp32
        weight gradient is handed straight to its sum (``_head_sink``), skipping bf16 rounding."""
        claim(self.param_names, self.params)
        self.master = [
            p.detach().to(self.state_device, torch.float32, copy=True).requires_grad_(True) for p in self.params
        ]
        self._sums = [Fp32GradSum() for _ in self.params]
        hook_params(self, self.params, self._sums, self._hooks)
        # the chunked head's fp32 weight gradient goes straight into its sum (no bf16 rounding)
        parts = _decoder_and_head(model) if self.logprob_chunk else None
        head_w = getattr(parts[1], "weight", None) if parts is not None else None
        for p, acc in zip(self.params, self._sums):
            if p is head_w:
                self._head_sink = acc.add

    def close(self) -> None:
        """Remove the gradient hooks and free the fp32 masters and optimizer state. The model
        keeps its current weights and can be trained by a new learner; this one cannot step,
        save or load any more. Idempotent."""
        if self.closed:
            return
        self._finalizer()  # removes the hooks (once)
        release(self, self.params)
        for p in self.params:
            p.grad = None
        self.master, self._sums, self._head_sink = None, [], None
        self.optimizer.state.clear()
        self.optimizer.param_groups.clear()
        self.closed = True
        if self.device.type == "cuda":
            torch.cuda.empty_cache()

    def __enter__(self) -> Learner:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def _check_open(self, what: str) -> None:
        if self.closed:
            raise RunStateError(
                f"Learner.{what}: this learner was closed (its hooks and optimizer state are gone); "
                "build a new Learner over the model"
            )

    # ------------------------------------------------------------------ device placement
    def _move_state(self, dev: torch.device) -> None:
        """Masters (in place: the optimizer holds these very tensors) and AdamW state to ``dev``.
        Scalar ``step`` counters stay where the optimizer keeps them (CPU unless fused)."""
        if self._state_at == dev:
            return
        with torch.no_grad():
            if self.master is not None:
                for m in self.master:
                    m.data = m.data.to(dev)
                    m.grad = None
            for st in self.optimizer.state.values():
                for k, v in list(st.items()):
                    if isinstance(v, Tensor) and (k != "step" or self.fused):
                        st[k] = v.to(dev)
        self._state_at = dev

    def offload_state(self) -> None:
        """Move the fp32 masters and optimizer state to CPU memory (a role that is not training
        then holds only its weights on the GPU); the next ``step`` brings them back. No-op when
        they already live on the CPU (CPU runs, ``offload_optimizer``)."""
        self._move_state(torch.device("cpu"))

    def onload_state(self) -> None:
        """Masters and optimizer state back to ``state_device`` (``step`` does this itself)."""
        self._move_state(self.state_device)

    def move_weights(self, device: torch.device | str) -> None:
        """Model weights (and a separate reference model's) to ``device``: recipes park an idle
        role's weights in CPU memory and bring them back before it samples or trains."""
        self.model.to(device)
        if self.ref_model is not None:
            self.ref_model.to(device)

    # ------------------------------------------------------------------ internals
    def _opt_params(self) -> list[Tensor]:
        return self.master if self.master is not None else self.params

    def _zero_grads(self) -> None:
        for p in self.params:
            p.grad = None
        if self.master is not None:
            for m in self.master:
                m.grad = None
        for acc in self._sums:
            acc.sum = None

    def _take_grads(self) -> None:
        """Hand each parameter's fp32 gradient sum to its master: the same tensor when the master
        lives on the parameter's device, one device-to-host copy per parameter and step when it
        lives in CPU memory (``offload_optimizer``)."""
        if self.master is None:
            return
        for m, acc in zip(self.master, self._sums):
            if acc.sum is not None:
                m.grad = acc.sum.to(m.device)
                acc.sum = None

    def _logprobs(self, model: Any, b: Batch, return_entropy: bool = False, head_grad_sink: Any = None) -> Any:
        """Completion log-probs of micro-batch ``b`` under ``model`` (its layout decides the path)."""
        if b.prompt_ids is not None:
            return shared_prompt_logprobs(
                model,
                b.prompt_ids,
                b.prompt_mask,
                b.input_ids,
                b.completion_mask,
                return_entropy=return_entropy,
                chunk_tokens=self.logprob_chunk,
                head_grad_sink=head_grad_sink,
            )
        return sequence_logprobs(
            model,
            b.input_ids,
            b.attention_mask,
            b.completion_mask,
            return_entropy=return_entropy,
            chunk_tokens=self.logprob_chunk,
            head_grad_sink=head_grad_sink,
        )

    def _ref_logprobs(self, b: Batch) -> Tensor:
        with torch.no_grad():
            if self.ref_model is not None:
                return self._logprobs(self.ref_model, b).float()
            with self.model.disable_adapter():  # LoRA: the frozen base is the reference
                return self._logprobs(self.model, b).float()

    # ------------------------------------------------------------------ API
    def step(self, groups: list[RolloutGroup]) -> dict[str, float]:
        """One GRPO update (``epochs_per_batch`` optimizer steps) from ``groups``.

        Returns metrics; ``skipped == 1`` means no optimizer step was taken because every group
        had zero reward variance (or no completion tokens were left).
        """
        cfg = self.cfg
        self._check_open("step")
        validate_groups(groups)
        seqs, n_zero = advantage_rows(groups, cfg)
        n_tokens = sum(len(s[1]) for s in seqs)
        metrics = step_metrics(groups, seqs, n_zero, n_tokens, cfg.drop_zero_std, self.current_lr)
        if not seqs or n_tokens == 0:
            self.phase_step += cfg.epochs_per_batch  # the schedule moves on: its position is the phase's step
            metrics.update(skipped=1.0, step=float(self.step_count))
            return metrics
        mbs, real, padded = self._micro_batches(seqs)
        metrics.update(micro_batches=float(len(mbs)), pad_frac=1.0 - real / max(1, padded))
        metrics.update(self._updates(mbs, n_tokens))
        metrics.update(skipped=0.0, step=float(self.step_count))
        return metrics

    def _micro_batches(self, seqs: list[Row]) -> tuple[list[Batch], int, int]:
        """The update batch's micro-batches, with its real and its padded token counts."""
        cfg = self.cfg
        if cfg.share_prompt:
            mbs = self._shared_micro_batches(seqs)
            real = sum(len(c) for _, c, _, _ in seqs) + sum(len(b_p) for b_p in {id(s[0]): s[0] for s in seqs}.values())
            padded = sum(b.input_ids.numel() + (0 if b.prompt_ids is None else b.prompt_ids.numel()) for b in mbs)
            return mbs, real, padded
        packed = cfg.max_tokens_per_micro_batch is not None
        groups_idx = pack_micro_batches(
            [len(p) + len(c) for p, c, _, _ in seqs], cfg.max_tokens_per_micro_batch, cfg.micro_batch_size
        )
        mbs = [collate([seqs[i] for i in idx], self.pad_id, self.device, left_pad_all=packed) for idx in groups_idx]
        return mbs, sum(len(p) + len(c) for p, c, _, _ in seqs), sum(b.input_ids.numel() for b in mbs)

    def _updates(self, mbs: list[Batch], n_tokens: int) -> dict[str, float]:
        """The ``epochs_per_batch`` optimizer steps over ``mbs`` in train mode, their figures
        averaged over the steps. pi_old: the sampler's log-probs, else a frozen pre-update forward
        when mu > 1; the reference log-probs once, before the first step."""
        cfg = self.cfg
        self.onload_state()
        was_training = self.model.training
        self.model.train()
        try:
            if mbs[0].old_logp is None and cfg.epochs_per_batch > 1:
                with torch.no_grad():
                    for b in mbs:
                        b.old_logp = self._logprobs(self.model, b).float()
            need_ref = cfg.beta_kl > 0 or self.ref_model is not None
            if need_ref:
                for b in mbs:
                    b.ref_logp = self._ref_logprobs(b)
            sums = dict.fromkeys(UPDATE_FIGURES, 0.0)
            for _epoch in range(cfg.epochs_per_batch):
                ep = self._one_update(mbs, n_tokens)
                for k in sums:
                    sums[k] += ep[k]
        finally:
            self.model.train(was_training)
        return {k: v / cfg.epochs_per_batch for k, v in sums.items()}

    def _shared_micro_batches(self, seqs: list[Row]) -> list[Batch]:
        """``share_prompt`` micro-batches: whole groups (rows of one prompt object are one group,
        in order), as many as ``micro_batch_size`` rows allow (at least one group each)."""
        groups: list[tuple[list[int], list[tuple[list[int], float, list[float] | None]]]] = []
        for p, c, a, lp in seqs:
            if not groups or groups[-1][0] is not p:
                groups.append((p, []))
            groups[-1][1].append((c, a, lp))
        out, cur, rows = [], [], 0
        for g in groups:
            if cur and rows + len(g[1]) > self.cfg.micro_batch_size:
                out.append(collate_shared(cur, self.pad_id, self.device))
                cur, rows = [], 0
            cur.append(g)
            rows += len(g[1])
        if cur:
            out.append(collate_shared(cur, self.pad_id, self.device))
        return out

    def _one_update(self, mbs: list[Batch], n_tokens: int) -> dict[str, float]:
        """One optimizer step over ``mbs``: the backward passes, then the step (``_apply_grads``)."""
        total_loss, ent_sum, acc = self._backward(mbs, n_tokens)
        grad_norm = self._apply_grads()
        self.step_count += 1
        return {"loss": total_loss, "grad_norm": float(grad_norm), "entropy": ent_sum / n_tokens, **acc}

    def _backward(self, mbs: list[Batch], n_tokens: int) -> tuple[float, float, dict[str, float]]:
        """The policy loss of every micro-batch, backward: (summed loss, summed entropy, the
        clip / ratio / KL figures weighted by each micro-batch's share of the tokens)."""
        cfg = self.cfg
        n_seqs = sum(int(b.adv.shape[0]) for b in mbs)  # every answer of the update batch (seq-mean's S)
        self._zero_grads()
        total_loss = 0.0
        acc = {"clip_frac": 0.0, "clip_frac_low": 0.0, "clip_frac_high": 0.0, "ratio_mean": 0.0, "kl": 0.0}
        ent_sum = 0.0
        for b in mbs:
            logp, ent = self._logprobs(self.model, b, return_entropy=True, head_grad_sink=self._head_sink)
            logp = logp.float()  # (B, T)
            ent_sum += float(ent.sum())
            old = b.old_logp if b.old_logp is not None else logp.detach()
            loss, st = policy_loss(
                logp,
                old,
                b.adv,
                b.completion_mask,
                eps_low=cfg.eps_low,
                eps_high=cfg.eps_high,
                ref_logp_NT=b.ref_logp,
                beta=cfg.beta_kl,
                num_tokens=float(n_tokens),
                agg=cfg.loss_agg,
                num_seqs=float(n_seqs),
            )
            if not torch.isfinite(loss):
                self._zero_grads()
                raise NonFiniteLossError(
                    f"GRPO loss is {loss.item()} at learner step {self.step_count} (weights untouched); "
                    "check the learning rate, rewards and model dtype"
                )
            loss.backward()
            total_loss += float(loss.detach())
            w = float(st["n_tokens"]) / n_tokens
            for k in acc:
                acc[k] += float(st[k]) * w
        return total_loss, ent_sum, acc

    def _apply_grads(self) -> Tensor:
        """Clip and take the optimizer step (at the phase's scheduled lr), then copy the fp32
        masters back into the half-precision weights; returns the gradient norm before clipping."""
        cfg = self.cfg
        # half-precision models: the hooks summed the gradients in fp32 on the device (nothing is
        # left in p.grad); they reach the masters here, once per step
        self._take_grads()
        opt_params = self._opt_params()
        max_norm = cfg.grad_clip if cfg.grad_clip > 0 else float("inf")
        grad_norm = torch.nn.utils.clip_grad_norm_(opt_params, max_norm)
        if not torch.isfinite(grad_norm):
            self._zero_grads()
            raise NonFiniteLossError(
                f"gradient norm is {grad_norm.item()} at learner step {self.step_count} (weights untouched)"
            )
        if self._lr_factor is not None:  # a phase's schedule (begin_phase); otherwise the optimizer's own lr
            for group in self.optimizer.param_groups:
                group["lr"] = self.current_lr
        self.optimizer.step()
        self.phase_step += 1
        self._zero_grads()
        if self.master is not None:
            with torch.no_grad():
                for p, m in zip(self.params, self.master):
                    p.copy_(m)
        return grad_norm

    # ------------------------------------------------------------------ checkpoints
    def save(self, out_dir: str | Path, tokenizer: Any = None) -> Path:
        """Write the model (``save_pretrained``), the tokenizer when given (or held), optimizer
        state + fp32 masters (``learner_optim.pt``) and step + config (``learner_state.json``)."""
        self._check_open("save")
        d = Path(out_dir)
        d.mkdir(parents=True, exist_ok=True)
        self.model.save_pretrained(str(d))
        fault_point("checkpoint")  # the moment a crash leaves a model without its optimiser state
        tok = tokenizer if tokenizer is not None else self.tokenizer
        if tok is not None:
            tok.save_pretrained(str(d))
        # into a Python file, not a path: on a full disk torch's "unexpected pos" error then carries
        # the write's OSError (ENOSPC) as its context, which recipes.disk_full reads
        with open(d / OPTIM_FILE, "wb") as f:
            torch.save(
                {
                    "optimizer": self.optimizer.state_dict(),
                    "master": None if self.master is None else [m.detach().cpu() for m in self.master],
                    "param_names": self.param_names,
                },
                f,
            )
        (d / STATE_JSON).write_text(
            json.dumps({"step": self.step_count, "config": self.cfg.model_dump(mode="json")}, indent=2)
        )
        return d

    def load(self, in_dir: str | Path) -> None:
        """Restore weights, optimizer state, masters and step from ``save``'s folder.

        The learner's own config is kept (so a resumed run may change e.g. the lr); the saved
        config is only used to check that the trainable parameters match.
        """
        self._check_open("load")
        d = Path(in_dir)
        for f in (STATE_JSON, OPTIM_FILE):
            if not (d / f).is_file():
                raise RunStateError(f"learner checkpoint {d} is missing {f}")
        state = json.loads((d / STATE_JSON).read_text())
        blob = torch.load(d / OPTIM_FILE, map_location="cpu", weights_only=True)
        if blob["param_names"] != self.param_names:
            raise RunStateError(
                f"learner checkpoint {d}: trainable parameters differ from this model "
                f"({len(blob['param_names'])} saved vs {len(self.param_names)} here)"
            )
        for i, (name, param) in enumerate(zip(self.param_names, self._opt_params())):
            saved = blob["optimizer"]["state"].get(i, {}).get("exp_avg")
            if saved is not None and tuple(saved.shape) != tuple(param.shape):
                raise RunStateError(
                    f"learner checkpoint {d}: its optimiser state is for another model ({name}: "
                    f"{tuple(saved.shape)} saved vs {tuple(param.shape)} here)"
                )
        self._load_weights(d)
        if blob["master"] is not None:
            if self.master is None:
                raise RunStateError(f"learner checkpoint {d} has fp32 masters but this model is fp32")
            with torch.no_grad():
                for p, m, saved in zip(self.params, self.master, blob["master"]):
                    m.copy_(saved.to(m.device))
                    p.copy_(m)
        self.optimizer.load_state_dict(blob["optimizer"])
        for group in self.optimizer.param_groups:  # load_state_dict brings the saved ones: this config's apply
            group.update(lr=self.cfg.lr, betas=self.cfg.betas, weight_decay=self.cfg.weight_decay)
        self.step_count = int(state["step"])

    def load_weights(self, in_dir: str | Path) -> None:
        """Only the weights of an HF folder (``*.safetensors``, or a LoRA adapter), e.g. what
        another trainer produced (``backend=verl``); optimizer state, masters and step stay as
        they are, and fp32 masters are refreshed from the new weights."""
        self._load_weights(Path(in_dir))
        if self.master is not None:
            with torch.no_grad():
                for p, m in zip(self.params, self.master):
                    m.copy_(p.detach().to(m.device, m.dtype))

    def _load_weights(self, d: Path) -> None:
        if self.cfg.lora:
            from peft import set_peft_model_state_dict
            from peft.utils import load_peft_weights

            set_peft_model_state_dict(self.model, load_peft_weights(str(d), device=str(self.device)))
            return
        from safetensors.torch import load_file

        files = sorted(p for p in d.glob("*.safetensors") if not p.name.startswith("adapter"))
        if not files:
            raise RunStateError(f"learner checkpoint {d} has no *.safetensors weights")
        sd: dict[str, Tensor] = {}
        for f in files:
            sd.update(load_file(str(f), device=str(self.device)))
        missing, unexpected = self.model.load_state_dict(sd, strict=False)
        loaded_ptrs = {p.data_ptr() for n, p in self.model.state_dict().items() if n in sd}
        bad_missing = [k for k in missing if self.model.state_dict()[k].data_ptr() not in loaded_ptrs]
        if unexpected or bad_missing:
            raise RunStateError(
                f"learner checkpoint {d}: weights do not match the model "
                f"(missing {bad_missing[:5]}, unexpected {list(unexpected)[:5]})"
            )


__all__ = [
    "OPTIM_FILE",
    "STATE_JSON",
    "Learner",
    "LearnerConfig",
    "NonFiniteLossError",
    "RolloutGroup",
    "pack_micro_batches",
    "pack_rows",
    "resolve_fused",
    "resolve_gradient_checkpointing",
    "resolve_logprob_chunk",
]
