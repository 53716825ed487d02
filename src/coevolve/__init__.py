"""coevolve: self-evolving RL for reasoning LLMs (D2Evo, DiagEvo, baselines) with a built-in toy world."""

__version__ = "0.1.0"
