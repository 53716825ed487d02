"""Weights on their way from a learner's module to an engine, shared by every engine that does
not sample the module itself (``vllm`` in process, ``ray`` actors): the Hugging Face names and
tensors (LoRA deltas added), a fixed host-memory version, a weightless model folder, and a
module rebuilt from a config and a state dict without initialising it first."""

from __future__ import annotations

import contextlib
import tempfile
from collections.abc import Iterator
from typing import Any

import torch

from coevolve.engine.base import unwrap_peft


def hf_weights(model: Any) -> Iterator[tuple[str, torch.Tensor]]:
    """``(checkpoint name, tensor)`` for every weight of ``model`` as vLLM's loaders expect them
    (Hugging Face names). A PEFT LoRA model yields its base weights with the active adapters
    added (W + ΔW, ``get_delta_weight``), computed per layer without touching the learner's
    module (no merge/unmerge round trip that would perturb the trained weights)."""
    base = unwrap_peft(model)
    loras = {
        name: mod
        for name, mod in base.named_modules()
        if hasattr(mod, "base_layer") and hasattr(mod, "get_delta_weight") and hasattr(mod, "lora_A")
    }
    with torch.no_grad():
        for name, tensor in base.state_dict().items():
            if ".lora_" in name:
                continue
            if ".base_layer." not in name:
                yield name, tensor
                continue
            owner, _, leaf = name.partition(".base_layer.")
            mod = loras.get(owner)
            if mod is not None and leaf == "weight" and not getattr(mod, "disable_adapters", False):
                merged = set(getattr(mod, "merged_adapters", []))
                for adapter in mod.active_adapters:
                    if adapter in mod.lora_A and adapter not in merged:
                        tensor = tensor + mod.get_delta_weight(adapter).to(tensor.dtype)
            yield f"{owner}.{leaf}", tensor


def host_snapshot(model: Any, dtype: torch.dtype) -> dict[str, torch.Tensor]:
    """A fixed weight version: host-memory copies of ``model``'s weights in the engine's dtype."""
    return {
        name: t.detach().to("cpu", dtype=dtype if t.is_floating_point() else t.dtype, copy=True)
        for name, t in hf_weights(model)
    }


def model_folder(model: Any, tokenizer: Any, prefix: str = "coevolve-engine-") -> tempfile.TemporaryDirectory[str]:
    """A folder describing ``model`` to vLLM: its config, generation config and tokenizer, no
    weights (the engine starts with dummy weights and gets the real ones pushed from memory),
    so a model that was trained, wrapped (LoRA) or never saved needs no checkpoint."""
    tmp = tempfile.TemporaryDirectory(prefix=prefix)
    base = unwrap_peft(model)
    base.config.save_pretrained(tmp.name)
    gen = getattr(base, "generation_config", None)
    if gen is not None:
        with contextlib.suppress(Exception):
            gen.save_pretrained(tmp.name)
    tokenizer.save_pretrained(tmp.name)
    return tmp


def module_from_state(config: Any, state: dict[str, torch.Tensor], dtype: torch.dtype) -> Any:
    """A causal LM of ``config``'s architecture holding the weights ``state`` (Hugging Face
    names, as ``host_snapshot`` makes them), in eval mode on the CPU.

    Built by transformers' own loader, which constructs the module on the meta device: no weight
    is randomly initialised before being overwritten (``from_config`` would draw every one of a
    4B model's parameters on the CPU first, minutes on one thread), tied weights stay tied and
    non-persistent buffers (rotary ``inv_freq``, which no state dict holds) are recomputed from
    the config. The module's tensors are ``state``'s own where dtype and layout allow (no copy),
    so ``state`` must not be written to afterwards by anyone else."""
    from transformers import AutoModelForCausalLM

    with torch.device("meta"):  # only to learn the concrete class; allocates nothing
        cls = type(AutoModelForCausalLM.from_config(config))
    model, info = cls.from_pretrained(None, config=config, state_dict=state, dtype=dtype, output_loading_info=True)
    wrong = {
        k: sorted(v)[:5] for k, v in info.items() if k in ("missing_keys", "unexpected_keys", "mismatched_keys") and v
    }
    if wrong:  # the loader would have initialised the missing ones at random
        raise ValueError(f"module_from_state: the state dict does not fit {cls.__name__}: {wrong}")
    model.eval()
    return model
