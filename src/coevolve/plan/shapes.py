"""A model's shape from its ``config.json`` (no weights): parameter count, KV bytes per token,
activation bytes per token and layer, LoRA parameter count."""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from coevolve.config.base import is_toy_model
from coevolve.errors import ModelLoadError


@dataclass(frozen=True)
class ModelShape:
    """A dense decoder-only transformer, as far as memory and FLOPs go."""

    model_type: str
    layers: int
    hidden: int
    intermediate: int
    heads: int
    kv_heads: int
    head_dim: int
    vocab: int
    tied: bool
    qk_norm: bool = False
    attention_bias: bool = False

    @classmethod
    def from_config(cls, d: dict[str, Any], where: str = "config.json") -> ModelShape:
        """From a Hugging Face ``config.json`` dict (Llama / Qwen2 / Qwen3 / Mistral style)."""
        d = {**d.get("text_config", {}), **d} if "hidden_size" not in d else d
        try:
            hidden, heads = int(d["hidden_size"]), int(d["num_attention_heads"])
            return cls(
                model_type=str(d.get("model_type", "?")),
                layers=int(d["num_hidden_layers"]),
                hidden=hidden,
                intermediate=int(d["intermediate_size"]),
                heads=heads,
                kv_heads=int(d.get("num_key_value_heads") or heads),
                head_dim=int(d.get("head_dim") or hidden // heads),
                vocab=int(d["vocab_size"]),
                tied=bool(d.get("tie_word_embeddings", False)),
                qk_norm=str(d.get("model_type", "")).startswith("qwen3"),
                attention_bias=bool(d.get("attention_bias", str(d.get("model_type", "")) == "qwen2")),
            )
        except (KeyError, TypeError, ValueError) as e:
            raise ModelLoadError(
                f"{where}: not a dense decoder config the planner understands (missing/bad {e})"
            ) from None

    @property
    def q_dim(self) -> int:
        return self.heads * self.head_dim

    @property
    def kv_dim(self) -> int:
        return self.kv_heads * self.head_dim

    def linears(self) -> list[tuple[str, int, int]]:
        """(name, in, out) of one decoder layer's linear maps."""
        H, I = self.hidden, self.intermediate
        return [
            ("q_proj", H, self.q_dim),
            ("k_proj", H, self.kv_dim),
            ("v_proj", H, self.kv_dim),
            ("o_proj", self.q_dim, H),
            ("gate_proj", H, I),
            ("up_proj", H, I),
            ("down_proj", I, H),
        ]

    @property
    def layer_params(self) -> int:
        n = sum(i * o for _, i, o in self.linears()) + 2 * self.hidden
        if self.qk_norm:
            n += 2 * self.head_dim
        if self.attention_bias:
            n += self.q_dim + 2 * self.kv_dim
        return n

    @property
    def n_params(self) -> int:
        emb = self.vocab * self.hidden
        return emb * (1 if self.tied else 2) + self.layers * self.layer_params + self.hidden

    @property
    def largest_param(self) -> int:
        """Elements of the largest single tensor (the embedding): the transient half gradient."""
        return max(self.vocab * self.hidden, max(i * o for _, i, o in self.linears()))

    def lora_params(self, r: int, targets: str | list[str]) -> int:
        names = (
            [n for n, _, _ in self.linears()]
            if targets == "all-linear"
            else ([targets] if isinstance(targets, str) else list(targets))
        )
        per = sum(r * (i + o) for n, i, o in self.linears() if any(n == t or n.endswith(t) for t in names))
        return per * self.layers

    def kv_bytes_per_token(self, dtype_bytes: int) -> int:
        return 2 * self.layers * self.kv_dim * dtype_bytes

    def act_bytes_per_token_layer(self, dtype_bytes: int) -> int:
        """Activations one decoder layer keeps for backward, per token: RMSNorm fp32 inputs and
        outputs, q/k/v projections (+ Qwen3's fp32 q/k norms), RoPE outputs, the attention output
        (SDPA's memory-efficient kernels keep no scores), and SwiGLU's gate, up, SiLU and product."""
        b, H, I, q, kv = dtype_bytes, self.hidden, self.intermediate, self.q_dim, self.kv_dim
        n = 8 * H + b * (2 * H + 3 * q + 3 * kv + 4 * I)
        if self.qk_norm:
            n += 4 * (q + kv)
        return n


def load_model_shape(cfg: Any) -> tuple[ModelShape, str, bool]:
    """(shape, where it came from, toy?) for ``cfg.model``: the folder's ``config.json`` alone
    (weights may be absent: plan before downloading), or the toy base model's architecture."""
    path = cfg.model.path
    if path is None:
        from coevolve.world.toy import build_model, build_tokenizer  # lazy: pulls transformers, tokenizers

        return (
            ModelShape.from_config(build_model(len(build_tokenizer())).config.to_dict(), "toy"),
            "toy base model",
            True,
        )
    p = Path(path)
    f = p / "config.json"
    if not f.is_file():
        raise ModelLoadError(f"model.path: {p} has no config.json (the planner needs only that file)")
    try:
        d = json.loads(f.read_text(encoding="utf-8"))
    except (OSError, json.JSONDecodeError) as e:
        raise ModelLoadError(f"{f}: not valid JSON ({e})") from None

    return ModelShape.from_config(d, str(f)), str(f), is_toy_model(p)
