"""The process's random generators as JSON, for mid-phase saves (``run.save_every``)."""

from __future__ import annotations

import random
from typing import Any


def random_states() -> dict[str, Any]:
    """The process's generators (python, numpy, torch CPU and CUDA) as JSON, for a mid-phase save:
    ``set_random_states`` puts them back, so what draws from them after a resume draws as if the
    run had never stopped."""
    import numpy as np
    import torch

    kind, keys, pos, has_gauss, gauss = np.random.get_state()
    version, internal, py_gauss = random.getstate()
    return {
        "python": [version, list(internal), py_gauss],
        "numpy": [kind, [int(k) for k in keys], int(pos), int(has_gauss), float(gauss)],
        "torch": torch.get_rng_state().tolist(),
        "cuda": [s.tolist() for s in torch.cuda.get_rng_state_all()] if torch.cuda.is_available() else [],
    }


def set_random_states(states: dict[str, Any]) -> None:
    """Restore what ``random_states`` saved (CUDA's only where this process has the same GPUs)."""
    import numpy as np
    import torch

    version, internal, py_gauss = states["python"]
    random.setstate((version, tuple(internal), py_gauss))
    kind, keys, pos, has_gauss, gauss = states["numpy"]
    np.random.set_state((kind, np.array(keys, dtype=np.uint32), pos, has_gauss, gauss))
    torch.set_rng_state(torch.tensor(states["torch"], dtype=torch.uint8))
    cuda = states.get("cuda") or []
    if cuda and torch.cuda.is_available() and len(cuda) == torch.cuda.device_count():
        torch.cuda.set_rng_state_all([torch.tensor(c, dtype=torch.uint8) for c in cuda])
