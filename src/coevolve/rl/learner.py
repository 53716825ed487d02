"""GRPO learner: one optimizer update from a batch of rollout groups.

The learner owns the optimizer and nothing else: it gets finished rollouts (token ids and
rewards per group) from the recipes, so sampling backend, reward and curriculum stay
independent of it. Design choices and why:

- zero-variance groups are dropped before the update (their tokens never enter the token-mean
  normaliser: the DAPO / TRL loss_type="dapo" / verl token-mean formulation);
- the token-mean normaliser is the *global* count of active completion tokens, so micro-batch
  size only trades memory for time and never changes the update;
- with half-precision models the optimizer keeps fp32 master weights (a 1e-6 update is far
  below half a bf16 ulp and would round away) and copies them back after each step;
- non-finite loss or gradients raise ``NonFiniteLossError`` before any weight is touched.
"""

from __future__ import annotations

import json
import math
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import torch
from torch import Tensor

from pydantic import Field, field_validator

from coevolve.errors import CoevolveError, ConfigError, RunStateError
from coevolve.rl.grpo import RLInputError, group_advantages, policy_loss, sequence_logprobs
from coevolve.schema import Strict

STATE_JSON = "learner_state.json"
OPTIM_FILE = "learner_optim.pt"


class NonFiniteLossError(CoevolveError):
    """The loss or the gradient became NaN/inf; the weights were left untouched."""


class LearnerConfig(Strict):
    """Optimizer and GRPO-loss settings (the ``learner`` section of every recipe config).

    ``epochs_per_batch`` is μ: optimizer steps per rollout batch (1 = on-policy, ratio == 1).
    ``micro_batch_size`` is in sequences. ``lora`` needs the ``lora`` extra (peft).
    """

    lr: float = Field(3e-5, gt=0, allow_inf_nan=False, description="AdamW learning rate (toy: 3e-5; 3e-4 collapses, "
                      "1e-4 degrades; real 4B: ~1e-6).")
    betas: tuple[float, float] = Field((0.9, 0.99), description="AdamW betas, each in [0, 1).")
    weight_decay: float = Field(0.0, ge=0, description="AdamW weight decay.")
    grad_clip: float = Field(1.0, ge=0, description="Global gradient-norm clip (0 = no clipping).")
    eps_low: float = Field(0.2, ge=0, lt=1, description="Lower PPO clip (1 - eps_low).")
    eps_high: float = Field(0.28, ge=0, description="Upper PPO clip (1 + eps_high), DAPO clip-higher.")
    beta_kl: float = Field(0.0, ge=0, description="k3 KL coefficient to the reference model (0 = no reference).")
    scale_std: bool = Field(True, description="Divide advantages by the group std (False = Dr. GRPO).")
    adv_eps: float = Field(1e-4, gt=0, description="Added to the group std (TRL: 1e-4; verl: 1e-6).")
    drop_zero_std: bool = Field(True, description="Drop zero-variance groups before the update (their tokens never "
                                "enter the token-mean normaliser).")
    micro_batch_size: int = Field(64, ge=1, description="Sequences per forward/backward micro-batch.")
    epochs_per_batch: int = Field(1, ge=1, description="GRPO inner epochs (μ) over each rollout batch.")
    lora: bool = Field(False, description="Train LoRA adapters (needs the 'lora' extra: peft).")
    lora_r: int = Field(16, ge=1, description="LoRA rank.")
    lora_alpha: int = Field(32, ge=1, description="LoRA alpha.")
    lora_dropout: float = Field(0.0, ge=0, lt=1, description="LoRA dropout.")
    lora_target_modules: str | list[str] = Field("all-linear", description="LoRA target modules (peft syntax).")

    @field_validator("betas")
    @classmethod
    def _betas(cls, v: tuple[float, float]) -> tuple[float, float]:
        if not all(0.0 <= b < 1.0 for b in v):
            raise ValueError(f"each beta must be in [0, 1), got {list(v)}")
        return (float(v[0]), float(v[1]))


@dataclass
class RolloutGroup:
    """G completions of one prompt with their rewards.

    ``logprobs`` (optional) are the sampler's per-token log-probs; when given for every group
    they are used as log pi_old (off-policy correction for a separate rollout engine), otherwise
    pi_old is the learner's own no-grad forward (mu > 1) or ``logp.detach()`` (mu == 1).
    """

    prompt_ids: list[int]
    completion_ids: list[list[int]]
    rewards: list[float]
    logprobs: list[list[float]] | None = None


def _validate_groups(groups: list[RolloutGroup]) -> None:
    if not groups:
        raise RLInputError("Learner.step: got no rollout groups")
    for gi, g in enumerate(groups):
        if not g.prompt_ids:
            raise RLInputError(f"Learner.step: group {gi} has an empty prompt_ids")
        if len(g.completion_ids) != len(g.rewards):
            raise RLInputError(
                f"Learner.step: group {gi} has {len(g.completion_ids)} completions but {len(g.rewards)} rewards"
            )
        if len(g.rewards) < 2:
            raise RLInputError(f"Learner.step: group {gi} has G={len(g.rewards)} samples; GRPO needs >= 2")
        if not all(math.isfinite(float(r)) for r in g.rewards):
            raise RLInputError(f"Learner.step: group {gi} has a NaN/inf reward: {g.rewards}")
        if g.logprobs is not None:
            if len(g.logprobs) != len(g.completion_ids) or any(
                len(lp) != len(c) for lp, c in zip(g.logprobs, g.completion_ids)
            ):
                raise RLInputError(f"Learner.step: group {gi} logprobs do not match completion lengths")
    with_lp = sum(g.logprobs is not None for g in groups)
    if 0 < with_lp < len(groups):
        raise RLInputError("Learner.step: logprobs given for some groups but not all")


@dataclass
class _Batch:
    input_ids: Tensor  # (B, P + T)
    attention_mask: Tensor  # (B, P + T)
    completion_mask: Tensor  # (B, T)
    adv: Tensor  # (B,)
    old_logp: Tensor | None  # (B, T) sampler log-probs, or None
    ref_logp: Tensor | None = None  # (B, T), filled when beta_kl > 0


def _collate(
    seqs: list[tuple[list[int], list[int], float, list[float] | None]], pad_id: int, device: torch.device
) -> _Batch:
    """[left-padded prompt | right-padded completion]: positions are recomputed from the mask,
    and all completions start in the same column so log-probs need only the last T logits."""
    P = max(len(s[0]) for s in seqs)
    T = max(1, max(len(s[1]) for s in seqs))
    B = len(seqs)
    ids = torch.full((B, P + T), pad_id, dtype=torch.long)  # (B, P + T)
    attn = torch.zeros((B, P + T), dtype=torch.long)  # (B, P + T)
    cmask = torch.zeros((B, T), dtype=torch.float32)  # (B, T)
    adv = torch.tensor([s[2] for s in seqs], dtype=torch.float32)  # (B,)
    has_old = seqs[0][3] is not None
    old = torch.zeros((B, T), dtype=torch.float32) if has_old else None  # (B, T)
    for i, (p, c, _, lp) in enumerate(seqs):
        ids[i, P - len(p) : P] = torch.tensor(p, dtype=torch.long)
        attn[i, P - len(p) : P] = 1
        if c:
            ids[i, P : P + len(c)] = torch.tensor(c, dtype=torch.long)
            attn[i, P : P + len(c)] = 1
            cmask[i, : len(c)] = 1.0
            if old is not None and lp is not None:
                old[i, : len(c)] = torch.tensor(lp, dtype=torch.float32)
    return _Batch(
        ids.to(device), attn.to(device), cmask.to(device), adv.to(device),
        None if old is None else old.to(device),
    )


def _wrap_lora(model: Any, cfg: LearnerConfig) -> Any:
    try:
        from peft import LoraConfig, get_peft_model
    except ImportError as e:
        raise ConfigError(
            "LearnerConfig.lora=True needs the 'peft' package: pip install 'coevolve[lora]'"
        ) from e
    lcfg = LoraConfig(
        r=cfg.lora_r, lora_alpha=cfg.lora_alpha, lora_dropout=cfg.lora_dropout,
        target_modules=cfg.lora_target_modules, task_type="CAUSAL_LM",
    )
    return get_peft_model(model, lcfg)


class Learner:
    """GRPO learner over a Hugging Face causal LM (shared in place with the sampler).

    With ``cfg.lora`` the model is wrapped with PEFT; use ``learner.model`` for sampling then.
    ``ref_model`` is needed only when ``cfg.beta_kl > 0`` (with LoRA the adapter-free base
    serves as reference when it is None).
    """

    def __init__(
        self, model: Any, cfg: LearnerConfig | None = None, ref_model: Any = None, tokenizer: Any = None
    ) -> None:
        self.cfg = cfg or LearnerConfig()
        pad = getattr(tokenizer, "pad_token_id", None)
        self.pad_id = int(pad) if pad is not None else 0  # any id works: padded positions are masked
        if self.cfg.lora:
            model = _wrap_lora(model, self.cfg)
        if self.cfg.beta_kl > 0 and ref_model is None and not self.cfg.lora:
            raise ConfigError("LearnerConfig.beta_kl > 0 needs a ref_model (or lora=True)")
        self.model = model
        self.ref_model = ref_model
        self.tokenizer = tokenizer
        named = [(n, p) for n, p in model.named_parameters() if p.requires_grad]
        if not named:
            raise ConfigError("Learner: the model has no trainable parameters")
        self.param_names = [n for n, _ in named]
        self.params = [p for _, p in named]
        self.device = self.params[0].device
        # fp32 master copies when the model holds half-precision weights
        self.master: list[Tensor] | None = None
        if any(p.dtype != torch.float32 for p in self.params):
            self.master = [p.detach().float().clone().requires_grad_(True) for p in self.params]
        opt_params = self.master if self.master is not None else self.params
        self.optimizer = torch.optim.AdamW(
            opt_params, lr=self.cfg.lr, betas=self.cfg.betas, weight_decay=self.cfg.weight_decay
        )
        self.step_count = 0

    # ------------------------------------------------------------------ internals
    def _opt_params(self) -> list[Tensor]:
        return self.master if self.master is not None else self.params

    def _zero_grads(self) -> None:
        for p in self.params:
            p.grad = None
        if self.master is not None:
            for m in self.master:
                m.grad = None

    def _ref_logprobs(self, b: _Batch) -> Tensor:
        with torch.no_grad():
            if self.ref_model is not None:
                return sequence_logprobs(self.ref_model, b.input_ids, b.attention_mask, b.completion_mask).float()
            with self.model.disable_adapter():  # LoRA: the frozen base is the reference
                return sequence_logprobs(self.model, b.input_ids, b.attention_mask, b.completion_mask).float()

    # ------------------------------------------------------------------ API
    def step(self, groups: list[RolloutGroup]) -> dict[str, float]:
        """One GRPO update (``epochs_per_batch`` optimizer steps) from ``groups``.

        Returns metrics; ``skipped == 1`` means no optimizer step was taken because every group
        had zero reward variance (or no completion tokens were left).
        """
        cfg = self.cfg
        _validate_groups(groups)
        all_rewards = [float(r) for g in groups for r in g.rewards]
        all_lens = [len(c) for g in groups for c in g.completion_ids]
        seqs: list[tuple[list[int], list[int], float, list[float] | None]] = []
        n_zero = 0
        for g in groups:
            adv_1G, zero_1 = group_advantages(
                torch.tensor([g.rewards], dtype=torch.float64), scale_std=cfg.scale_std, eps=cfg.adv_eps
            )
            if bool(zero_1[0]):
                n_zero += 1
                if cfg.drop_zero_std:
                    continue
            for k, c in enumerate(g.completion_ids):
                lp = None if g.logprobs is None else [float(x) for x in g.logprobs[k]]
                seqs.append((list(g.prompt_ids), list(c), float(adv_1G[0, k]), lp))
        rt = torch.tensor(all_rewards, dtype=torch.float64)
        n_tokens = sum(len(s[1]) for s in seqs)
        metrics: dict[str, float] = {
            "frac_zero_std": n_zero / len(groups),
            "reward_mean": float(rt.mean()),
            "reward_std": float(rt.std(unbiased=False)),
            "completion_len_mean": sum(all_lens) / len(all_lens),
            "n_groups": float(len(groups)),
            "n_groups_used": float(len(groups) - n_zero if cfg.drop_zero_std else len(groups)),
            "n_tokens": float(n_tokens),
            "adv_abs_mean": sum(abs(s[2]) for s in seqs) / len(seqs) if seqs else 0.0,
            "lr": cfg.lr,
            "loss": 0.0, "grad_norm": 0.0, "clip_frac": 0.0, "clip_frac_low": 0.0,
            "clip_frac_high": 0.0, "ratio_mean": 1.0, "kl": 0.0, "entropy": 0.0,
        }
        if not seqs or n_tokens == 0:
            metrics.update(skipped=1.0, step=float(self.step_count))
            return metrics

        mbs = [
            _collate(seqs[i : i + cfg.micro_batch_size], self.pad_id, self.device)
            for i in range(0, len(seqs), cfg.micro_batch_size)
        ]
        was_training = self.model.training
        self.model.train()
        try:
            # pi_old: sampler log-probs, else a frozen pre-update forward when mu > 1
            if mbs[0].old_logp is None and cfg.epochs_per_batch > 1:
                with torch.no_grad():
                    for b in mbs:
                        b.old_logp = sequence_logprobs(
                            self.model, b.input_ids, b.attention_mask, b.completion_mask
                        ).float()
            need_ref = cfg.beta_kl > 0 or self.ref_model is not None
            if need_ref:
                for b in mbs:
                    b.ref_logp = self._ref_logprobs(b)
            sums = {k: 0.0 for k in ("loss", "grad_norm", "entropy", "clip_frac", "clip_frac_low", "clip_frac_high",
                                     "ratio_mean", "kl")}
            for _epoch in range(cfg.epochs_per_batch):
                ep = self._one_update(mbs, n_tokens)
                for k in sums:
                    sums[k] += ep[k]
        finally:
            self.model.train(was_training)
        for k, v in sums.items():
            metrics[k] = v / cfg.epochs_per_batch
        metrics.update(skipped=0.0, step=float(self.step_count))
        return metrics

    def _one_update(self, mbs: list[_Batch], n_tokens: int) -> dict[str, float]:
        cfg = self.cfg
        self._zero_grads()
        total_loss = 0.0
        acc = {"clip_frac": 0.0, "clip_frac_low": 0.0, "clip_frac_high": 0.0, "ratio_mean": 0.0, "kl": 0.0}
        ent_sum = 0.0
        for b in mbs:
            logp, ent = sequence_logprobs(
                self.model, b.input_ids, b.attention_mask, b.completion_mask, return_entropy=True
            )
            logp = logp.float()  # (B, T)
            ent_sum += float(ent.sum())
            old = b.old_logp if b.old_logp is not None else logp.detach()
            loss, st = policy_loss(
                logp, old, b.adv, b.completion_mask, eps_low=cfg.eps_low, eps_high=cfg.eps_high,
                ref_logp_NT=b.ref_logp, beta=cfg.beta_kl, num_tokens=float(n_tokens),
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
        if self.master is not None:
            for p, m in zip(self.params, self.master):
                m.grad = None if p.grad is None else p.grad.detach().float()
                p.grad = None
        opt_params = self._opt_params()
        max_norm = cfg.grad_clip if cfg.grad_clip > 0 else float("inf")
        grad_norm = torch.nn.utils.clip_grad_norm_(opt_params, max_norm)
        if not torch.isfinite(grad_norm):
            self._zero_grads()
            raise NonFiniteLossError(
                f"gradient norm is {grad_norm.item()} at learner step {self.step_count} (weights untouched)"
            )
        self.optimizer.step()
        self._zero_grads()
        if self.master is not None:
            with torch.no_grad():
                for p, m in zip(self.params, self.master):
                    p.copy_(m)
        self.step_count += 1
        return {"loss": total_loss, "grad_norm": float(grad_norm), "entropy": ent_sum / n_tokens, **acc}

    # ------------------------------------------------------------------ checkpoints
    def save(self, out_dir: str | Path, tokenizer: Any = None) -> Path:
        """Write the model (``save_pretrained``), the tokenizer when given (or held), optimizer
        state + fp32 masters (``learner_optim.pt``) and step + config (``learner_state.json``)."""
        d = Path(out_dir)
        d.mkdir(parents=True, exist_ok=True)
        self.model.save_pretrained(str(d))
        tok = tokenizer if tokenizer is not None else self.tokenizer
        if tok is not None:
            tok.save_pretrained(str(d))
        torch.save(
            {
                "optimizer": self.optimizer.state_dict(),
                "master": None if self.master is None else [m.detach().cpu() for m in self.master],
                "param_names": self.param_names,
            },
            d / OPTIM_FILE,
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
        self._load_weights(d)
        if blob["master"] is not None:
            if self.master is None:
                raise RunStateError(f"learner checkpoint {d} has fp32 masters but this model is fp32")
            with torch.no_grad():
                for p, m, saved in zip(self.params, self.master, blob["master"]):
                    m.copy_(saved.to(m.device))
                    p.copy_(m)
        self.optimizer.load_state_dict(blob["optimizer"])
        self.step_count = int(state["step"])

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
