"""GRPO: pure tensor functions (``grpo``) and the optimizer-owning ``Learner``."""

from coevolve.rl.grpo import (
    RLInputError,
    group_advantages,
    policy_loss,
    selective_log_softmax,
    sequence_logprobs,
    token_entropy,
)
from coevolve.rl.learner import Learner, LearnerConfig, NonFiniteLossError, RolloutGroup

__all__ = [
    "RLInputError",
    "group_advantages",
    "policy_loss",
    "selective_log_softmax",
    "sequence_logprobs",
    "token_entropy",
    "Learner",
    "LearnerConfig",
    "NonFiniteLossError",
    "RolloutGroup",
]
