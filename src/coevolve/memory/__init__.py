"""DiagEvo hierarchical error memory: store + scheduling (``store``), embeddings (``embed``),
diagnosers (``diagnose``) and the per-round maintenance step (``maintain``)."""

from coevolve.memory.diagnose import Diagnoser, DiagnoserStats, Diagnosis, LLMDiagnoser, TraceDiagnoser, strip_surface
from coevolve.memory.embed import Embedder, HashEmbedder, MiniLMEmbedder, cosine_top_k, make_embedder
from coevolve.memory.maintain import (
    KeptQuestion,
    MaintenanceResult,
    MemoryConfig,
    maintain_memory,
    targeted_p1_by_cause,
    targeted_questions,
)
from coevolve.memory.store import Cause, ErrorMemory, SkillNode, Target, epsilon, render_tree

__all__ = [
    "Cause",
    "Diagnoser",
    "DiagnoserStats",
    "Diagnosis",
    "Embedder",
    "ErrorMemory",
    "HashEmbedder",
    "KeptQuestion",
    "LLMDiagnoser",
    "MaintenanceResult",
    "MemoryConfig",
    "MiniLMEmbedder",
    "SkillNode",
    "Target",
    "TraceDiagnoser",
    "cosine_top_k",
    "epsilon",
    "maintain_memory",
    "make_embedder",
    "render_tree",
    "strip_surface",
    "targeted_p1_by_cause",
    "targeted_questions",
]
