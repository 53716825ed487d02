"""GRPO core as pure tensor functions (the project's own formulation).

Default (``agg="token-mean"``), equal to TRL ``GRPOTrainer(loss_type="dapo")`` and verl
``loss_agg_mode="token-mean"``:

    A_i   = (r_i - mean_g) / (std_g + eps)            (std with Bessel's correction; or r_i - mean_g)
    rho   = exp(logp - old_logp)
    l_it  = -min(rho A_i, clip(rho, 1 - eps_low, 1 + eps_high) A_i) + beta (exp(ref - logp) - (ref - logp) - 1)
    L     = (1/T) sum_i sum_t m_it l_it

with T the number of active completion tokens of the *whole* update batch (all micro-batches),
so that micro-batching changes nothing but memory. The textbook GRPO of DeepSeekMath (Eq. 3 there,
which both papers cite as "GRPO (Eq. 2)") averages each sequence over its own tokens first
(``agg="seq-mean"``, verl ``seq-mean-token-mean``), with a symmetric clip and a KL coefficient:

    L     = (1/S) sum_i (1/|o_i|) sum_t m_it l_it         (S sequences in the whole update batch)

The default (token-mean, clip-higher 0.28, no KL, zero-variance groups dropped) is our choice,
not the papers'; ``configs/textbook_grpo.yaml`` selects the textbook form. Kept free of
model/optimizer state so the maths can be unit-tested against a naive loop implementation.

Chunked log-probs (``sequence_logprobs(..., chunk_tokens=C)``): the decoder's last hidden states
of the K active completion tokens are projected by the LM head C tokens at a time,

    logp_k = z_k[y_k] - logsumexp(z_k),      H_k = -sum_v p_kv log p_kv,  log p_k = z_k - logsumexp(z_k),

with z = lm_head(h) upcast to fp32, each chunk under non-reentrant activation checkpointing, so
neither forward nor backward ever holds more than a (C, V) slice of the logits (a 4k-token row
of Qwen3's 152k vocabulary is 2.5 GB in fp32). Padding positions never reach the LM head.

The head's weight gradient dW = sum_chunks dz^T h is summed in fp32. Autograd would round it to
the weight's dtype (bf16) on the way out; a caller that keeps fp32 master weights passes
``head_grad_sink`` instead, which receives the fp32 dW (and autograd gets none for the head), so
no bf16 rounding sits between the sum and the master.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import torch
from torch import Tensor

from coevolve.errors import CoevolveError


class RLInputError(CoevolveError, ValueError):
    """Malformed input to the GRPO functions (shapes, group sizes, non-finite rewards)."""


# A group whose reward std is below this is "zero variance": every sample got the same reward,
# so the group carries no policy-gradient signal.
ZERO_STD_ATOL = 1e-6


def group_advantages(rewards_BG: Tensor, scale_std: bool = True, eps: float = 1e-4) -> tuple[Tensor, Tensor]:
    """Group-relative advantages.

    ``rewards_BG`` holds G rewards for each of B prompts. Returns ``(adv_BG, zero_std_B)``.
    ``scale_std=False`` is Dr. GRPO (no division by the group std, which would up-weight nearly
    solved / nearly hopeless prompts). Zero-variance groups get exactly 0 advantage.
    """
    if rewards_BG.dim() != 2:
        raise RLInputError(f"group_advantages: rewards must be (B, G), got shape {tuple(rewards_BG.shape)}")
    if rewards_BG.shape[1] < 2:
        raise RLInputError(f"group_advantages: need at least 2 samples per group, got G={rewards_BG.shape[1]}")
    if not torch.isfinite(rewards_BG).all():
        raise RLInputError("group_advantages: rewards contain NaN or inf")
    r = rewards_BG.double()  # (B, G) in float64 so the zero-std test is not fooled by rounding
    mean_B1 = r.mean(dim=1, keepdim=True)  # (B, 1)
    std_B1 = r.std(dim=1, unbiased=True, keepdim=True)  # (B, 1)
    zero_std_B = std_B1.squeeze(1) < ZERO_STD_ATOL  # (B,)
    adv = r - mean_B1  # (B, G)
    if scale_std:
        adv = adv / (std_B1 + eps)
    adv = adv.masked_fill(zero_std_B[:, None], 0.0)
    return adv.to(rewards_BG.dtype if rewards_BG.is_floating_point() else torch.float32), zero_std_B


def selective_log_softmax(logits_NTV: Tensor, index_NT: Tensor) -> Tensor:
    """``log_softmax(logits)[..., index]`` without materialising a full fp32 log-softmax.

    For bf16/fp16 logits of a 150k vocabulary the (N, T, V) fp32 copy is the memory peak of an RL
    step; here half-precision rows are upcast one sequence at a time.
    """
    if logits_NTV.dtype in (torch.float32, torch.float64):
        sel_NT = logits_NTV.gather(-1, index_NT.unsqueeze(-1)).squeeze(-1)  # (N, T)
        lse_NT = torch.logsumexp(logits_NTV, dim=-1)  # (N, T)
        return sel_NT - lse_NT
    rows = []
    for row_TV, idx_T in zip(logits_NTV, index_NT):
        lp_TV = torch.log_softmax(row_TV.float(), dim=-1)  # (T, V)
        rows.append(lp_TV.gather(-1, idx_T.unsqueeze(-1)).squeeze(-1))  # (T,)
    return torch.stack(rows)  # (N, T)


def token_entropy(logits_NTV: Tensor) -> Tensor:
    """Entropy (nats) of each next-token distribution, no grad; half-precision rows are upcast
    one sequence at a time (same memory reasoning as ``selective_log_softmax``)."""
    with torch.no_grad():
        rows = []
        for row_TV in logits_NTV.detach():
            lp_TV = torch.log_softmax(row_TV.float(), dim=-1)  # (T, V)
            rows.append(-(lp_TV.exp() * lp_TV).sum(-1))  # (T,)
        return torch.stack(rows)  # (N, T)


def sequence_logprobs(
    model: Any,
    input_ids: Tensor,
    attention_mask: Tensor,
    completion_mask: Tensor,
    return_entropy: bool = False,
    chunk_tokens: int | None = None,
    head_grad_sink: Callable[[Tensor], None] | None = None,
) -> Tensor | tuple[Tensor, Tensor]:
    """Per-token log-probs (raw model distribution, no temperature) of the completion tokens.

    Layout: ``input_ids`` / ``attention_mask`` are (N, L) = [left-padded prompt | completion
    right-padded], the completion occupying the last T = ``completion_mask.shape[1]`` columns.
    Position ids are ``cumsum(mask) - 1`` so left padding does not shift positions (this is what
    makes batched log-probs equal unbatched ones). Only the last T+1 logits are computed
    (``logits_to_keep``). Returns (N, T) log-probs, zeroed where ``completion_mask`` is 0.
    Gradients flow when called outside ``torch.no_grad``. With ``return_entropy`` also returns
    the (N, T) detached entropies of the same distributions (entropy collapse is the main GRPO
    failure mode to watch), zeroed outside the mask.

    ``chunk_tokens`` > 0 takes the chunked path (module docstring): same values and gradients
    within float rounding, memory O(chunk x V) instead of O(N x T x V). The completion tokens
    may sit anywhere in the last T columns (``completion_mask`` says where), so both the
    [left-padded prompt | right-padded completion] layout and fully left-padded rows work.
    Models whose logits are not a plain ``lm_head(h)`` (soft-capping, logit scaling) fall back
    to the full-logits path. ``head_grad_sink`` (chunked path, plain linear head only): backward
    hands the head weight's fp32 gradient to it instead of to autograd (module docstring).
    """
    _check_sequence_inputs(input_ids, attention_mask, completion_mask)
    position_ids = (attention_mask.long().cumsum(dim=1) - 1).clamp(min=0)  # (N, L)
    parts = _decoder_and_head(model) if chunk_tokens else None
    if parts is not None:
        return _chunked_sequence_logprobs(
            parts[0],
            parts[1],
            input_ids,
            attention_mask,
            position_ids,
            completion_mask,
            int(chunk_tokens or 0),
            return_entropy,
            head_grad_sink,
        )
    return _full_logits_logprobs(model, input_ids, attention_mask, position_ids, completion_mask, return_entropy)


def _check_sequence_inputs(input_ids: Tensor, attention_mask: Tensor, completion_mask: Tensor) -> None:
    if input_ids.shape != attention_mask.shape:
        raise RLInputError(
            f"sequence_logprobs: input_ids {tuple(input_ids.shape)} and attention_mask "
            f"{tuple(attention_mask.shape)} differ"
        )
    N, L = input_ids.shape
    T = completion_mask.shape[1]
    if completion_mask.shape[0] != N or T >= L:
        raise RLInputError(
            f"sequence_logprobs: completion_mask {tuple(completion_mask.shape)} does not fit "
            f"input_ids {tuple(input_ids.shape)} (need T < L, at least one prompt token)"
        )


def _full_logits_logprobs(
    model: Any,
    input_ids: Tensor,
    attention_mask: Tensor,
    position_ids: Tensor,
    completion_mask: Tensor,
    return_entropy: bool,
) -> Tensor | tuple[Tensor, Tensor]:
    """``sequence_logprobs`` from the model's last T + 1 logits (``logits_to_keep``), all at once."""
    L = input_ids.shape[1]
    T = completion_mask.shape[1]
    out = model(
        input_ids=input_ids,
        attention_mask=attention_mask,
        position_ids=position_ids,
        logits_to_keep=T + 1,
        use_cache=False,
    )
    logits_NTV = out.logits[:, -(T + 1) : -1, :]  # (N, T, V): logits at j predict token j+1
    targets_NT = input_ids[:, L - T :]  # (N, T)
    logp_NT = selective_log_softmax(logits_NTV, targets_NT)  # (N, T)
    m_NT = completion_mask.to(logp_NT.dtype)
    if return_entropy:
        return logp_NT * m_NT, token_entropy(logits_NTV) * m_NT.detach()
    return logp_NT * m_NT


def _decoder_and_head(model: Any) -> tuple[Any, Any] | None:
    """(decoder backbone, LM head) of a plain causal LM (PEFT-wrapped or not), or None when the
    logits are not exactly ``lm_head(last_hidden_state)`` and the chunked path must not be used."""
    base = model.get_base_model() if hasattr(model, "get_base_model") else model
    get_dec, get_head = getattr(base, "get_decoder", None), getattr(base, "get_output_embeddings", None)
    if get_dec is None or get_head is None:
        return None
    cfg = getattr(base, "config", None)
    for post in ("final_logit_softcapping", "logit_scale", "output_multiplier_scale", "logits_scaling"):
        if getattr(cfg, post, None) not in (None, 1, 1.0):
            return None
    try:
        decoder, head = get_dec(), get_head()
    except (AttributeError, NotImplementedError):
        return None
    if decoder is None or head is None or decoder is base:
        return None
    return decoder, head


def _chunk_logp_entropy(head: Any, h_CH: Tensor, targets_C: Tensor) -> tuple[Tensor, Tensor]:
    """Log-prob of each target and (detached) entropy for C hidden states: one (C, V) fp32
    logits slice, freed on return (activation checkpointing recomputes it in backward)."""
    z_CV = head(h_CH).float()  # (C, V)
    lse_C = torch.logsumexp(z_CV, dim=-1)  # (C,)
    logp_C = z_CV.gather(-1, targets_C.unsqueeze(-1)).squeeze(-1) - lse_C  # (C,)
    with torch.no_grad():  # recomputed in backward too; elementwise, cheap next to the head matmul
        # -sum p log p on the normalised log-probs, as ``token_entropy``: lse - sum p z would
        # cancel two numbers of size |z| (~1e-3 error in fp32 at |z| ~ 30)
        lp_CV = z_CV.detach() - lse_C.detach()[:, None]  # (C, V)
        ent_C = -(lp_CV.exp() * lp_CV).sum(-1)  # (C,)
        del lp_CV
    return logp_C, ent_C


class _ChunkedLinearLogProbs(torch.autograd.Function):
    """log p(target) and entropy through a bias-free linear head, chunk by chunk, with a
    hand-written backward: it recomputes each chunk's logits and adds the chunk's weight gradient
    into ONE accumulator (fp32 for a half-precision head). Autograd over per-chunk graphs would
    instead materialise a full (V, H) weight gradient per chunk before summing them (measured:
    the chunked path then saved almost nothing on SmolLM2).

    Backward of logp_k = z_k[y_k] - logsumexp(z_k) with z = h W^T:  dz_k = g_k (onehot(y_k) - p_k),
    dh = dz W,  dW = dz^T h.  With a ``sink`` the fp32 dW goes to it and autograd gets None for W.
    """

    @staticmethod
    def forward(
        ctx: Any,
        h_KH: Tensor,
        weight_VH: Tensor,
        targets_K: Tensor,
        chunk: int,
        sink: Callable[[Tensor], None] | None = None,
    ) -> tuple[Tensor, Tensor]:
        K = h_KH.shape[0]
        logp_K = torch.empty(K, dtype=torch.float32, device=h_KH.device)
        ent_K = torch.empty_like(logp_K)
        lse_K = torch.empty_like(logp_K)
        for s in range(0, K, chunk):
            z_CV = torch.nn.functional.linear(h_KH[s : s + chunk], weight_VH).float()  # (C, V)
            lse_C = torch.logsumexp(z_CV, dim=-1)  # (C,)
            logp_K[s : s + chunk] = z_CV.gather(-1, targets_K[s : s + chunk, None]).squeeze(-1) - lse_C
            z_CV.sub_(lse_C[:, None])  # now log p, in place (same formula as token_entropy)
            ent_K[s : s + chunk] = -(z_CV.exp() * z_CV).sum(-1)
            lse_K[s : s + chunk] = lse_C
        ctx.save_for_backward(h_KH, weight_VH, targets_K, lse_K)
        ctx.chunk = chunk
        ctx.sink = sink
        ctx.mark_non_differentiable(ent_K)
        return logp_K, ent_K

    @staticmethod
    def backward(ctx: Any, g_logp_K: Tensor, _g_ent: Tensor) -> tuple[Tensor | None, Tensor | None, None, None, None]:
        h_KH, W_VH, t_K, lse_K = ctx.saved_tensors
        need_h, need_W = ctx.needs_input_grad[0], ctx.needs_input_grad[1]
        dh_KH = torch.empty_like(h_KH) if need_h else None
        dW_VH = torch.zeros(W_VH.shape, dtype=torch.float32, device=W_VH.device) if need_W else None
        for s in range(0, h_KH.shape[0], ctx.chunk):
            h_CH, g_C = h_KH[s : s + ctx.chunk], g_logp_K[s : s + ctx.chunk].float()
            dz_CV = torch.nn.functional.linear(h_CH, W_VH).float()  # (C, V) recomputed logits
            dz_CV.sub_(lse_K[s : s + ctx.chunk, None]).exp_().mul_(-g_C[:, None])  # -g p
            dz_CV.scatter_add_(-1, t_K[s : s + ctx.chunk, None], g_C[:, None])  # + g at the target
            dz_h = dz_CV.to(W_VH.dtype)
            del dz_CV
            if dh_KH is not None:
                dh_KH[s : s + ctx.chunk] = dz_h @ W_VH
            if dW_VH is not None:
                if W_VH.dtype == torch.float32:
                    dW_VH.addmm_(dz_h.T, h_CH)
                else:  # the product in the head's precision (as the plain path), summed over chunks in fp32
                    dW_VH.add_(dz_h.T @ h_CH)
        if dW_VH is not None and ctx.sink is not None:
            ctx.sink(dW_VH)  # fp32, unrounded
            dW_VH = None
        return dh_KH, None if dW_VH is None else dW_VH.to(W_VH.dtype), None, None, None


def chunked_token_logprobs(
    head: Any,
    h_KH: Tensor,
    targets_K: Tensor,
    chunk_tokens: int,
    head_grad_sink: Callable[[Tensor], None] | None = None,
) -> tuple[Tensor, Tensor]:
    """``(logp_K, entropy_K)`` of K tokens from their (K, H) hidden states, ``chunk_tokens`` at
    a time. A plain bias-free ``nn.Linear`` head (Llama, Qwen) goes through
    ``_ChunkedLinearLogProbs`` (whose fp32 weight gradient goes to ``head_grad_sink`` when
    given); any other head (e.g. a LoRA-wrapped one) through per-chunk non-reentrant
    checkpoints, where the sink is not used. Either way backward holds one (C, V) logits slice
    at a time."""
    if chunk_tokens < 1:
        raise RLInputError(f"chunked_token_logprobs: chunk_tokens must be >= 1, got {chunk_tokens}")
    if type(head) is torch.nn.Linear and head.bias is None:
        if h_KH.shape[0] == 0:
            z = h_KH.new_zeros((0,), dtype=torch.float32)
            return z, z
        logp_K, ent_K = _ChunkedLinearLogProbs.apply(h_KH, head.weight, targets_K, int(chunk_tokens), head_grad_sink)
        return logp_K, ent_K.detach()
    from torch.utils.checkpoint import checkpoint

    lps, ents = [], []
    grad = torch.is_grad_enabled() and (h_KH.requires_grad or any(p.requires_grad for p in head.parameters()))
    for s in range(0, h_KH.shape[0], chunk_tokens):
        h_CH, t_C = h_KH[s : s + chunk_tokens], targets_K[s : s + chunk_tokens]
        if grad:
            lp_C, ent_C = checkpoint(_chunk_logp_entropy, head, h_CH, t_C, use_reentrant=False)
        else:
            lp_C, ent_C = _chunk_logp_entropy(head, h_CH, t_C)
        lps.append(lp_C)
        ents.append(ent_C)
    if not lps:
        z = h_KH.new_zeros((0,), dtype=torch.float32)
        return z, z
    return torch.cat(lps), torch.cat(ents).detach()


def _scattered_token_logprobs(
    head: Any,
    h_NTH: Tensor,
    targets_NT: Tensor,
    active_NT: Tensor,
    chunk_tokens: int,
    return_entropy: bool,
    head_grad_sink: Callable[[Tensor], None] | None,
) -> Tensor | tuple[Tensor, Tensor]:
    """(N, T) log-probs (and, with ``return_entropy``, detached entropies) of ``targets_NT``
    from the hidden states ``h_NTH`` that predict them: only the K ``active_NT`` positions go
    through ``chunked_token_logprobs``, and the results are scattered back to (N, T) with zeros
    elsewhere. The chunked paths of ``sequence_logprobs`` and ``shared_prompt_logprobs`` both
    end here, so they lay out their outputs the same way."""
    N, T = active_NT.shape
    logp_K, ent_K = chunked_token_logprobs(head, h_NTH[active_NT], targets_NT[active_NT], chunk_tokens, head_grad_sink)
    logp_NT = torch.zeros((N, T), dtype=torch.float32, device=targets_NT.device)
    logp_NT = logp_NT.masked_scatter(active_NT, logp_K)  # (N, T), differentiable w.r.t. logp_K
    if return_entropy:
        ent_NT = torch.zeros((N, T), dtype=torch.float32, device=targets_NT.device).masked_scatter(active_NT, ent_K)
        return logp_NT, ent_NT
    return logp_NT


def _chunked_sequence_logprobs(
    decoder: Any,
    head: Any,
    input_ids: Tensor,
    attention_mask: Tensor,
    position_ids: Tensor,
    completion_mask: Tensor,
    chunk_tokens: int,
    return_entropy: bool,
    head_grad_sink: Callable[[Tensor], None] | None = None,
) -> Tensor | tuple[Tensor, Tensor]:
    """``sequence_logprobs`` without full logits: the decoder's hidden states at the K active
    completion positions go through ``chunked_token_logprobs`` and are scattered back to (N, T)."""
    L = input_ids.shape[1]
    T = completion_mask.shape[1]
    hidden_NLH = decoder(
        input_ids=input_ids, attention_mask=attention_mask, position_ids=position_ids, use_cache=False
    ).last_hidden_state  # (N, L, H)
    h_NTH = hidden_NLH[:, L - T - 1 : L - 1, :]  # (N, T, H): the state at j predicts token j+1
    active_NT = completion_mask > 0  # (N, T)
    targets_NT = input_ids[:, L - T :]  # (N, T)
    return _scattered_token_logprobs(head, h_NTH, targets_NT, active_NT, chunk_tokens, return_entropy, head_grad_sink)


def _shared_prompt_pass(decoder: Any, prompt_ids: Tensor, prompt_mask: Tensor, G: int) -> tuple[Tensor, dict[str, Any]]:
    """The prompt half of ``shared_prompt_logprobs``: runs the B prompts through ``decoder``
    once with a fresh KV cache, repeats that cache G times along the batch so each group's
    completions can run on top of it, and returns ``(h_last_BH, cache_kw)``: the prompts' last
    hidden states (B, H) and the keyword argument that hands the repeated cache to the next
    decoder call (its name depends on the transformers version)."""
    import inspect

    from transformers import DynamicCache

    # transformers renamed ``past_key_values`` to ``cache`` (5.x deprecates the old name)
    kw = "cache" if "cache" in inspect.signature(decoder.forward).parameters else "past_key_values"
    pos_BP = (prompt_mask.long().cumsum(dim=1) - 1).clamp(min=0)  # (B, P)
    cache = DynamicCache()
    out = decoder(input_ids=prompt_ids, attention_mask=prompt_mask, position_ids=pos_BP, use_cache=True, **{kw: cache})
    h_last_BH = out.last_hidden_state[:, -1, :]  # (B, H): predicts each group's first completion token
    cache.batch_repeat_interleave(G)
    return h_last_BH, {kw: cache}


def _group_size(prompt_ids: Tensor, prompt_mask: Tensor, completion_ids: Tensor, completion_mask: Tensor) -> int:
    """G = N / B of ``shared_prompt_logprobs``' layout; ``RLInputError`` when it does not fit."""
    B, N = prompt_ids.shape[0], completion_ids.shape[0]
    if prompt_mask.shape != prompt_ids.shape or completion_mask.shape != completion_ids.shape:
        raise RLInputError("shared_prompt_logprobs: ids and masks differ in shape")
    if B == 0 or N % B != 0:
        raise RLInputError(f"shared_prompt_logprobs: {N} completions do not split into groups of {B} prompts")
    return N // B


def _completion_pass(
    decoder: Any, prompt_mask: Tensor, completion_ids: Tensor, completion_mask: Tensor, G: int, cache_kw: dict[str, Any]
) -> Tensor:
    """The decoder's (N, T, H) hidden states of the completions on top of their prompt's repeated
    KV cache, at the unshared layout's positions (prompt length onwards)."""
    T = completion_ids.shape[1]
    plen_N = prompt_mask.long().sum(dim=1).repeat_interleave(G)  # (N,)
    pos_NT = plen_N[:, None] + torch.arange(T, device=completion_ids.device)[None, :]  # (N, T)
    c_attn_NT = (completion_mask > 0).to(prompt_mask.dtype)  # (N, T)
    attn = torch.cat([prompt_mask.repeat_interleave(G, dim=0), c_attn_NT], dim=1)  # (N, P + T)
    return decoder(
        input_ids=completion_ids, attention_mask=attn, position_ids=pos_NT, use_cache=True, **cache_kw
    ).last_hidden_state


def shared_prompt_logprobs(
    model: Any,
    prompt_ids: Tensor,
    prompt_mask: Tensor,
    completion_ids: Tensor,
    completion_mask: Tensor,
    return_entropy: bool = False,
    chunk_tokens: int | None = None,
    head_grad_sink: Callable[[Tensor], None] | None = None,
) -> Tensor | tuple[Tensor, Tensor]:
    """``sequence_logprobs`` of G completions per prompt with each prompt's forward pass done
    once: a GRPO group shares its prompt, so the decoder runs the B prompts, its KV cache is
    repeated G times along the batch (``DynamicCache.batch_repeat_interleave``; gradients of
    the G copies add up in the prompt's keys and values, as in the unshared pass), and the N = B·G
    completions run on top of it. With prompts of P tokens and completions of T, a step costs
    B·P + N·T token passes instead of N·(P + T).

    Layout: ``prompt_ids`` / ``prompt_mask`` (B, P) left-padded; ``completion_ids`` /
    ``completion_mask`` (N, T) right-padded, rows grouped by prompt (rows g·G .. g·G + G - 1
    complete prompt g). Positions are those of the unshared layout (the prompt's ``cumsum(mask)
    - 1``, then the prompt length onwards), so the values equal ``sequence_logprobs`` on
    [prompt | completion] rows within float rounding. The first completion token is predicted
    by the prompt's last hidden state, token j by the completion's state j-1. Needs a plain
    decoder + LM head (``_decoder_and_head``) and a model that keeps a KV cache in training
    (activation checkpointing turns the cache off). ``head_grad_sink``: as in ``sequence_logprobs``.
    """
    G = _group_size(prompt_ids, prompt_mask, completion_ids, completion_mask)
    parts = _decoder_and_head(model)
    if parts is None:
        raise RLInputError("shared_prompt_logprobs: the model's logits are not a plain LM head over a decoder")
    decoder, head = parts
    h_last_BH, cache_kw = _shared_prompt_pass(decoder, prompt_ids, prompt_mask, G)
    h_comp_NTH = _completion_pass(decoder, prompt_mask, completion_ids, completion_mask, G, cache_kw)  # (N, T, H)
    h_NTH = torch.cat([h_last_BH.repeat_interleave(G, dim=0)[:, None, :], h_comp_NTH[:, :-1, :]], dim=1)  # (N, T, H)
    active_NT = completion_mask > 0  # (N, T)
    if chunk_tokens:
        return _scattered_token_logprobs(
            head, h_NTH, completion_ids, active_NT, int(chunk_tokens), return_entropy, head_grad_sink
        )
    logits_NTV = head(h_NTH)  # (N, T, V)
    m_NT = completion_mask.to(torch.float32)
    logp_NT = selective_log_softmax(logits_NTV, completion_ids).float() * m_NT
    if return_entropy:
        return logp_NT, token_entropy(logits_NTV).float() * m_NT.detach()
    return logp_NT


def policy_loss(
    logp_NT: Tensor,
    old_logp_NT: Tensor,
    adv_N: Tensor,
    mask_NT: Tensor,
    eps_low: float = 0.2,
    eps_high: float = 0.28,
    ref_logp_NT: Tensor | None = None,
    beta: float = 0.0,
    num_tokens: float | Tensor | None = None,
    agg: str = "token-mean",
    num_seqs: float | Tensor | None = None,
) -> tuple[Tensor, dict[str, Tensor]]:
    """Clipped GRPO surrogate (+ optional k3 KL), aggregated by ``agg`` (module docstring).

    ``agg="token-mean"``: ``num_tokens`` is the global normaliser T (active completion tokens of
    the whole update batch); it defaults to ``mask_NT.sum()``. ``agg="seq-mean"``: each row's
    mean over its own active tokens, summed and divided by ``num_seqs`` (the whole update
    batch's rows; default N). Passing the global T (or S) to every micro-batch makes the summed
    micro-batch losses equal the full-batch loss exactly.

    Returns ``(loss, stats)``; stats are detached means over this call's active tokens:
    ``clip_frac_low`` (ratio < 1-eps_low with A < 0: the clip is active on the low side),
    ``clip_frac_high`` (ratio > 1+eps_high with A > 0), ``clip_frac`` (either), ``ratio_mean``,
    ``kl`` (k3, computed whenever ``ref_logp_NT`` is given) and ``n_tokens`` (local count).
    """
    _check_policy_inputs(logp_NT, old_logp_NT, adv_N, mask_NT, ref_logp_NT, beta, agg)
    m_NT = mask_NT.to(logp_NT.dtype)  # (N, T)
    a_N1 = adv_N.to(logp_NT.dtype)[:, None]  # (N, 1)
    per_tok_NT, ratio_NT = clipped_surrogate(logp_NT, old_logp_NT, a_N1, eps_low, eps_high)  # (N, T) each
    kl_NT = None if ref_logp_NT is None else k3_kl(ref_logp_NT, logp_NT)
    if kl_NT is not None and beta > 0:
        per_tok_NT = per_tok_NT + beta * kl_NT
    loss = aggregate_loss(per_tok_NT, m_NT, agg, num_tokens, num_seqs)
    return loss, _clip_stats(ratio_NT, a_N1, m_NT, kl_NT, eps_low, eps_high)


def _check_policy_inputs(
    logp_NT: Tensor,
    old_logp_NT: Tensor,
    adv_N: Tensor,
    mask_NT: Tensor,
    ref_logp_NT: Tensor | None,
    beta: float,
    agg: str,
) -> None:
    if logp_NT.shape != old_logp_NT.shape or logp_NT.shape != mask_NT.shape:
        raise RLInputError(
            f"policy_loss: shapes differ: logp {tuple(logp_NT.shape)}, old {tuple(old_logp_NT.shape)}, "
            f"mask {tuple(mask_NT.shape)}"
        )
    if adv_N.shape != logp_NT.shape[:1]:
        raise RLInputError(f"policy_loss: adv must be (N,), got {tuple(adv_N.shape)} for N={logp_NT.shape[0]}")
    if ref_logp_NT is not None and ref_logp_NT.shape != logp_NT.shape:
        raise RLInputError(f"policy_loss: ref_logp shape {tuple(ref_logp_NT.shape)} != {tuple(logp_NT.shape)}")
    if beta > 0 and ref_logp_NT is None:
        raise RLInputError("policy_loss: beta > 0 needs ref_logp_NT")
    if agg not in ("token-mean", "seq-mean"):
        raise RLInputError(f"policy_loss: agg must be 'token-mean' or 'seq-mean', got {agg!r}")


def clipped_surrogate(
    logp_NT: Tensor, old_logp_NT: Tensor, a_N1: Tensor, eps_low: float, eps_high: float
) -> tuple[Tensor, Tensor]:
    """Per-token clipped surrogate loss and the ratio it clips:

        rho = exp(logp - old_logp),   l = -min(rho A, clip(rho, 1 - eps_low, 1 + eps_high) A)

    ``a_N1`` is the (N, 1) advantage; returns ``(l_NT, rho_NT)``."""
    ratio_NT = torch.exp(logp_NT - old_logp_NT)  # (N, T)
    surr1_NT = ratio_NT * a_N1
    surr2_NT = torch.clamp(ratio_NT, 1.0 - eps_low, 1.0 + eps_high) * a_N1
    return -torch.min(surr1_NT, surr2_NT), ratio_NT


def k3_kl(ref_logp_NT: Tensor, logp_NT: Tensor) -> Tensor:
    """Per-token k3 estimator of KL(policy || ref), >= 0: d = ref - logp, exp(d) - d - 1."""
    d_NT = ref_logp_NT - logp_NT
    return torch.exp(d_NT) - d_NT - 1.0  # (N, T)


def aggregate_loss(
    per_tok_NT: Tensor,
    m_NT: Tensor,
    agg: str,
    num_tokens: float | Tensor | None = None,
    num_seqs: float | Tensor | None = None,
) -> Tensor:
    """The per-token loss l_it aggregated (module docstring): ``token-mean`` (1/T) Σ_i Σ_t m_it l_it
    with T = ``num_tokens`` (default this call's active tokens), ``seq-mean``
    (1/S) Σ_i (1/|o_i|) Σ_t m_it l_it with S = ``num_seqs`` (default N); both floored at 1."""
    if agg == "token-mean":
        denom = m_NT.sum() if num_tokens is None else torch.as_tensor(num_tokens, dtype=m_NT.dtype)
        return (per_tok_NT * m_NT).sum() / denom.clamp(min=1.0)
    per_seq_N = (per_tok_NT * m_NT).sum(dim=1) / m_NT.sum(dim=1).clamp(min=1.0)  # (N,)
    n_seq = torch.as_tensor(m_NT.shape[0] if num_seqs is None else num_seqs, dtype=m_NT.dtype)
    return per_seq_N.sum() / n_seq.clamp(min=1.0)


@torch.no_grad()
def _clip_stats(
    ratio_NT: Tensor, a_N1: Tensor, m_NT: Tensor, kl_NT: Tensor | None, eps_low: float, eps_high: float
) -> dict[str, Tensor]:
    """``policy_loss``'s stats: detached means over the active tokens of this call."""
    local_tokens = m_NT.sum()
    n_loc = local_tokens.clamp(min=1.0)
    low = ((ratio_NT < 1.0 - eps_low) & (a_N1 < 0)).to(m_NT.dtype) * m_NT
    high = ((ratio_NT > 1.0 + eps_high) & (a_N1 > 0)).to(m_NT.dtype) * m_NT
    return {
        "clip_frac_low": low.sum() / n_loc,
        "clip_frac_high": high.sum() / n_loc,
        "clip_frac": (low + high).sum() / n_loc,
        "ratio_mean": (ratio_NT * m_NT).sum() / n_loc,
        "kl": (kl_NT * m_NT).sum() / n_loc if kl_NT is not None else torch.zeros(()),
        "n_tokens": local_tokens.detach(),
    }
