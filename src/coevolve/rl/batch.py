"""Rollout groups into micro-batches: the groups' checks, packing rows under a row and token budget
(``pack_rows``, shared with the hf sampler's KV budget), and collation into padded tensors
(``collate``; ``collate_shared``: one prompt per group, its completions on the prompt's KV cache)."""

from __future__ import annotations

import math
from dataclasses import dataclass

import torch
from torch import Tensor

from coevolve.rl.grpo import RLInputError, group_advantages
from coevolve.rl.learner_config import LearnerConfig


def pack_rows(order: list[int], widths: list[int], max_rows: int, max_tokens: int) -> list[list[int]]:
    """Consecutive runs of ``order`` as padded batches: at most ``max_rows`` rows and
    ``rows x widest row <= max_tokens`` (``widths[i]``: row i's padded length); a row wider than
    the budget goes alone. Shared by the learner's micro-batches and the hf sampler's KV budget."""
    out: list[list[int]] = []
    cur: list[int] = []
    widest = 0
    for i in order:
        if cur and ((len(cur) + 1) * max(widest, widths[i]) > max_tokens or len(cur) + 1 > max_rows):
            out.append(cur)
            cur, widest = [], 0
        cur.append(i)
        widest = max(widest, widths[i])
    if cur:
        out.append(cur)
    return out


def pack_micro_batches(lengths: list[int], max_tokens: int | None, max_rows: int) -> list[list[int]]:
    """Row indices per micro-batch.

    ``max_tokens`` None: consecutive runs of ``max_rows`` rows in the given order (the original
    behaviour, kept bit-exact). Otherwise rows are sorted by length, longest first (so the
    largest micro-batch runs first and an out-of-memory shows at once), and packed by
    ``pack_rows``. Order inside the sort is stable, so packing is deterministic.
    """
    n = len(lengths)
    if max_tokens is None:
        return [list(range(i, min(i + max_rows, n))) for i in range(0, n, max_rows)]
    return pack_rows(sorted(range(n), key=lambda i: -lengths[i]), lengths, max_rows, max_tokens)


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


def validate_groups(groups: list[RolloutGroup]) -> None:
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
class Batch:
    input_ids: Tensor  # (B, P + T)
    attention_mask: Tensor  # (B, P + T)
    completion_mask: Tensor  # (B, T)
    adv: Tensor  # (B,)
    old_logp: Tensor | None  # (B, T) sampler log-probs, or None
    ref_logp: Tensor | None = None  # (B, T), filled when beta_kl > 0
    prompt_ids: Tensor | None = None  # (Bp, P) with share_prompt: one left-padded prompt per group; then
    prompt_mask: Tensor | None = None  # input_ids / attention_mask hold only the (B, T) completions


def collate(
    seqs: list[tuple[list[int], list[int], float, list[float] | None]],
    pad_id: int,
    device: torch.device,
    left_pad_all: bool = False,
) -> Batch:
    """[left-padded prompt | right-padded completion]: positions are recomputed from the mask,
    and all completions start in the same column so log-probs need only the last T logits.

    ``left_pad_all``: each whole row [prompt | completion] is left-padded instead, so a
    micro-batch is rows x (longest prompt + completion) rather than rows x (longest prompt +
    longest completion); every completion still lies in the last T columns (its mask says where).
    """
    P = max(len(s[0]) for s in seqs)
    T = max(1, max(len(s[1]) for s in seqs))
    B = len(seqs)
    if left_pad_all:
        P = max(1, max(len(s[0]) + len(s[1]) for s in seqs) - T)  # >= 1: sequence_logprobs needs T < L
    ids = torch.full((B, P + T), pad_id, dtype=torch.long)  # (B, P + T)
    attn = torch.zeros((B, P + T), dtype=torch.long)  # (B, P + T)
    cmask = torch.zeros((B, T), dtype=torch.float32)  # (B, T)
    adv = torch.tensor([s[2] for s in seqs], dtype=torch.float32)  # (B,)
    has_old = seqs[0][3] is not None
    old = torch.zeros((B, T), dtype=torch.float32) if has_old else None  # (B, T)
    for i, (p, c, _, lp) in enumerate(seqs):
        # completion columns [c0, c0 + len(c)) of the (P + T)-wide row; the prompt ends at c0
        c0 = P + T - len(c) if left_pad_all else P
        ids[i, c0 - len(p) : c0] = torch.tensor(p, dtype=torch.long)
        attn[i, c0 - len(p) : c0] = 1
        if c:
            ids[i, c0 : c0 + len(c)] = torch.tensor(c, dtype=torch.long)
            attn[i, c0 : c0 + len(c)] = 1
            t0 = c0 - P  # first completion column inside the last T
            cmask[i, t0 : t0 + len(c)] = 1.0
            if old is not None and lp is not None:
                old[i, t0 : t0 + len(c)] = torch.tensor(lp, dtype=torch.float32)
    return Batch(
        ids.to(device), attn.to(device), cmask.to(device), adv.to(device), None if old is None else old.to(device)
    )


def collate_shared(
    groups: list[tuple[list[int], list[tuple[list[int], float, list[float] | None]]]], pad_id: int, device: torch.device
) -> Batch:
    """``share_prompt`` layout: the groups' prompts left-padded (Bp, P); their completions
    right-padded (B, T), G consecutive rows per prompt, in ``input_ids`` / ``attention_mask``."""
    sizes = {len(comps) for _, comps in groups}
    if len(sizes) != 1:
        raise RLInputError(f"learner.share_prompt: groups of one micro-batch differ in size ({sorted(sizes)})")
    rows = [(c, a, lp) for _, comps in groups for c, a, lp in comps]
    P = max(len(p) for p, _ in groups)
    T = max(1, max(len(c) for c, _, _ in rows))
    pids = torch.full((len(groups), P), pad_id, dtype=torch.long)  # (Bp, P)
    pmask = torch.zeros((len(groups), P), dtype=torch.long)  # (Bp, P)
    for i, (p, _) in enumerate(groups):
        pids[i, P - len(p) :] = torch.tensor(p, dtype=torch.long)
        pmask[i, P - len(p) :] = 1
    ids = torch.full((len(rows), T), pad_id, dtype=torch.long)  # (B, T)
    cmask = torch.zeros((len(rows), T), dtype=torch.float32)  # (B, T)
    has_old = rows[0][2] is not None
    old = torch.zeros((len(rows), T), dtype=torch.float32) if has_old else None  # (B, T)
    for i, (c, _, lp) in enumerate(rows):
        if c:
            ids[i, : len(c)] = torch.tensor(c, dtype=torch.long)
            cmask[i, : len(c)] = 1.0
            if old is not None and lp is not None:
                old[i, : len(c)] = torch.tensor(lp, dtype=torch.float32)
    adv = torch.tensor([a for _, a, _ in rows], dtype=torch.float32)  # (B,)
    return Batch(
        ids.to(device),
        cmask.long().to(device),
        cmask.to(device),
        adv.to(device),
        None if old is None else old.to(device),
        prompt_ids=pids.to(device),
        prompt_mask=pmask.to(device),
    )


Row = tuple[list[int], list[int], float, list[float] | None]
"""One completion of the update batch: (prompt ids, completion ids, advantage, sampler log-probs)."""

UPDATE_FIGURES = ("loss", "grad_norm", "entropy", "clip_frac", "clip_frac_low", "clip_frac_high", "ratio_mean", "kl")
"""The figures of an optimizer step that ``Learner.step`` averages over ``epochs_per_batch``."""


def advantage_rows(groups: list[RolloutGroup], cfg: LearnerConfig) -> tuple[list[Row], int]:
    """Each completion with its group-normalised advantage (``group_advantages``), and the number
    of zero-variance groups (dropped with ``drop_zero_std``: they carry no signal)."""
    seqs: list[Row] = []
    n_zero = 0
    for g in groups:
        adv_1G, zero_1 = group_advantages(
            torch.tensor([g.rewards], dtype=torch.float64), scale_std=cfg.scale_std, eps=cfg.adv_eps
        )
        if bool(zero_1[0]):
            n_zero += 1
            if cfg.drop_zero_std:
                continue
        prompt = list(g.prompt_ids)  # one object per group: share_prompt groups rows by it
        for k, c in enumerate(g.completion_ids):
            lp = None if g.logprobs is None else [float(x) for x in g.logprobs[k]]
            seqs.append((prompt, list(c), float(adv_1G[0, k]), lp))
    return seqs, n_zero


def step_metrics(
    groups: list[RolloutGroup], seqs: list[Row], n_zero: int, n_tokens: int, drop_zero_std: bool, lr: float
) -> dict[str, float]:
    """A step's figures before its updates: the groups' rewards and lengths, what the update
    uses, ``lr`` (of its first optimizer step); the update's own figures start at their no-op values."""
    all_rewards = [float(r) for g in groups for r in g.rewards]
    all_lens = [len(c) for g in groups for c in g.completion_ids]
    rt = torch.tensor(all_rewards, dtype=torch.float64)
    return {
        "frac_zero_std": n_zero / len(groups),
        "reward_mean": float(rt.mean()),
        "reward_std": float(rt.std(unbiased=False)),
        "completion_len_mean": sum(all_lens) / len(all_lens),
        "n_groups": float(len(groups)),
        "n_groups_used": float(len(groups) - n_zero if drop_zero_std else len(groups)),
        "n_tokens": float(n_tokens),
        "adv_abs_mean": sum(abs(s[2]) for s in seqs) / len(seqs) if seqs else 0.0,
        "lr": lr,
        "micro_batches": 0.0,
        "pad_frac": 0.0,
        "loss": 0.0,
        "grad_norm": 0.0,
        "clip_frac": 0.0,
        "clip_frac_low": 0.0,
        "clip_frac_high": 0.0,
        "ratio_mean": 1.0,
        "kl": 0.0,
        "entropy": 0.0,
    }
