"""``backend=verl``: a GRPO phase trained by verl's ``main_ppo`` in a subprocess (docs/verl.md).

Why a subprocess and not an import: verl brings its own torch / vLLM / Ray pins and may live in
its own environment (``backend.verl.python``); the run folder, resume, report and memory only
see what the phase converts back (rollouts file, metrics, ``TrainResult``, an HF checkpoint).

``parquet`` writes verl's training rows, ``overrides`` the Hydra override list, ``reward`` is the
``compute_score`` verl calls (it dispatches to coevolve's rewards and grader), ``convert`` reads
verl's rollout dumps and metrics back, ``phase`` runs the whole phase.
"""
