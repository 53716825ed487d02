"""The built-in toy world: arithmetic problems with oracle answers, a char-level tokenizer, a
tiny Qwen3 base model of partial competence, the cause catalogue and the toy prompts.

Everything a recipe needs to run the whole self-evolution loop on a CPU in minutes.
"""

from coevolve.world.toy.causes import (
    CAUSES,
    Divergence,
    ToyCause,
    cause_by_text,
    explain_divergence,
    parse_trace,
    problem_for_causes,
    shows_cause,
)
from coevolve.world.toy.pretrain import MixConfig, build_base, build_model, default_cache_dir, ensure_base
from coevolve.world.toy.problems import (
    LEVELS,
    WORLD_VERSION,
    Problem,
    features,
    heldout_questions,
    heldout_tasks,
    labelled_set,
    make_problem,
    oracle,
    parse_toy_question,
    random_problem,
    sample_problems,
    sample_tasks,
)
from coevolve.world.toy.prompts import LEVEL_DIFFICULTY, ToyPrompter
from coevolve.world.toy.tokenizer import build_tokenizer

__all__ = [
    "CAUSES",
    "Divergence",
    "LEVELS",
    "LEVEL_DIFFICULTY",
    "MixConfig",
    "Problem",
    "ToyPrompter",
    "WORLD_VERSION",
    "build_base",
    "build_model",
    "build_tokenizer",
    "cause_by_text",
    "default_cache_dir",
    "ensure_base",
    "explain_divergence",
    "features",
    "heldout_questions",
    "heldout_tasks",
    "labelled_set",
    "make_problem",
    "oracle",
    "parse_toy_question",
    "parse_trace",
    "problem_for_causes",
    "random_problem",
    "sample_problems",
    "sample_tasks",
    "shows_cause",
    "ToyCause",
]
