"""Rollout engines: the ``Sampler`` protocol and the Hugging Face ``generate`` backend."""

from coevolve.engine.base import Sampler, SamplerError
from coevolve.engine.hf import HFSampler, load_model, resolve_device, resolve_dtype

__all__ = ["Sampler", "SamplerError", "HFSampler", "load_model", "resolve_device", "resolve_dtype"]
