"""Curriculum building blocks shared by D²Evo and DiagEvo, as functions over typed records.

* ``difficulty`` — pass rates of labelled questions, anchors, histograms (D²Evo steps 1-2);
* ``voting`` — pseudo-labels by vote, p1/p2, the confidence filters (both methods);
* ``verify`` — optional second check of pseudo-labels (D²Evo step 3);
* ``buffer`` — question keys, dedupe, the hybrid buffer (D²Evo step 3);
* ``proposals`` — the two pipelines both recipes call: a writer's GRPO reward, and a training
  pool from a trained writer;
* ``sampling`` — the one chunked-sampling helper and its per-chunk seed scheme, and staged
  sampling for the adaptive estimators;
* ``sequential`` — the stopping rules of the adaptive estimators (Beta posterior on the band /
  the confidence filter) and their exact error rates.

Only functions that take a ``Sampler`` sample, and they do so in as few batched calls as possible:
on every backend the cost of sampling is dominated by per-call overhead at small batch sizes.
"""

from coevolve.curriculum.buffer import build_hybrid_buffer, dedupe, normalize_question
from coevolve.curriculum.difficulty import (
    HIST_EDGES,
    PassRecord,
    carry_prior,
    estimate_difficulty,
    estimate_difficulty_adaptive,
    histogram_labels,
    mine_anchors,
    pass_rate_histogram,
    random_anchors,
)
from coevolve.curriculum.proposals import Candidate, CandidatePool, WriterBatch, propose_questions, score_writer_batch
from coevolve.curriculum.sampling import CurriculumError, chunk_params, sample_chunked, sample_staged, stage_params
from coevolve.curriculum.sequential import (
    BandPosterior,
    band_decision,
    band_posterior,
    beta_cdf,
    staged_outcome,
    vote_decision,
)
from coevolve.curriculum.verify import (
    JudgeVerifier,
    LabelVerifier,
    NoVerifier,
    OracleVerifier,
    make_verifier,
    parse_yes_no,
)
from coevolve.curriculum.voting import (
    OracleFn,
    VoteRecord,
    confidence_filter,
    label_correct,
    label_questions,
    label_questions_adaptive,
    pseudo_label_accuracy,
)

__all__ = [
    "BandPosterior",
    "band_decision",
    "band_posterior",
    "beta_cdf",
    "carry_prior",
    "estimate_difficulty_adaptive",
    "label_questions_adaptive",
    "sample_staged",
    "stage_params",
    "staged_outcome",
    "vote_decision",
    "HIST_EDGES",
    "Candidate",
    "CandidatePool",
    "CurriculumError",
    "JudgeVerifier",
    "LabelVerifier",
    "NoVerifier",
    "OracleFn",
    "OracleVerifier",
    "PassRecord",
    "VoteRecord",
    "WriterBatch",
    "build_hybrid_buffer",
    "chunk_params",
    "confidence_filter",
    "dedupe",
    "estimate_difficulty",
    "histogram_labels",
    "label_correct",
    "label_questions",
    "make_verifier",
    "mine_anchors",
    "normalize_question",
    "parse_yes_no",
    "pass_rate_histogram",
    "propose_questions",
    "pseudo_label_accuracy",
    "random_anchors",
    "sample_chunked",
    "score_writer_batch",
]
