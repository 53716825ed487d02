"""GRPO: pure tensor functions (``grpo``) and the optimizer-owning ``Learner``."""

from coevolve.rl.grpo import (
    RLInputError,
    group_advantages,
    policy_loss,
    selective_log_softmax,
    sequence_logprobs,
)
from coevolve.rl.learner import Learner, LearnerConfig, NonFiniteLossError, RolloutGroup

__all__ = [
    "RLInputError", "group_advantages", "policy_loss", "selective_log_softmax", "sequence_logprobs",
    "Learner", "LearnerConfig", "NonFiniteLossError", "RolloutGroup",
]
