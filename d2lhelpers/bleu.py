"""BLEU: the teaching formula of *Dive into Deep Learning*, and the corpus score we report.

Two numbers, two purposes:

- :func:`sentence_bleu` is the formula taught in the course, written out so a learner can read it;
  it scores one prediction against one label, between 0 and 1.
- :func:`corpus_bleu` is the number the course reports for a model: standard corpus-level BLEU
  (Papineni et al., 2002) computed by sacrebleu over all held-out sentences, each with all of its
  references, on the 0-100 scale.

And one question: is a difference between two systems' BLEU on the same sentences more than the
luck of which sentences were drawn? :func:`paired_bleu_test` answers with sacrebleu's paired
bootstrap resampling.
"""

from __future__ import annotations

import collections
import math
from collections.abc import Sequence
from typing import NamedTuple

from .basics import check_int

__all__ = ["sentence_bleu", "corpus_bleu", "BleuComparison", "paired_bleu_test"]


def _as_tokens(sentence, name: str) -> list[str]:
    if isinstance(sentence, str):
        return sentence.split()
    if not all(isinstance(token, str) for token in sentence):
        raise ValueError(f"{name} must be a string or a list of string tokens, got {sentence!r}")
    return list(sentence)


def _ngrams(tokens: list[str], n: int) -> collections.Counter:
    return collections.Counter(tuple(tokens[i:i + n]) for i in range(len(tokens) - n + 1))


def sentence_bleu(pred_tokens, label_tokens, k: int = 4) -> float:
    """BLEU of one prediction against one label, the teaching formula of *Dive into Deep Learning*:

        exp(min(0, 1 - len_label / len_pred)) * prod_{n=1..k} p_n ** (1 / 2**n)

    pred_tokens, label_tokens: lists of tokens (a string is split on white space).
    p_n is the clipped n-gram precision: the number of the prediction's n-grams that match the
    label's, each label n-gram matching at most as often as it occurs in the label, divided by the
    number of n-grams of the prediction (len_pred - n + 1). The first factor penalises predictions
    shorter than the label; the weights 1/2**n give longer n-grams, which are harder to match, more
    weight (p ** (1/2**n) grows towards 1 as n grows).

    Short outputs (as in the book): an order n with len_pred < n is skipped (the prediction has no
    n-gram to be precise or imprecise about; its factor is 1): an exact copy of a two-token label
    scores 1.0 for any k, and the brevity penalty alone punishes a prediction that is too short.
    An empty prediction scores 0.0. A label shorter than n while the prediction is not gives
    p_n = 0, hence 0.0. The result lies in [0, 1], and is 1.0 when the prediction equals the label.
    """
    check_int(k, "k")
    pred = _as_tokens(pred_tokens, "pred_tokens")
    label = _as_tokens(label_tokens, "label_tokens")
    len_pred, len_label = len(pred), len(label)
    if len_pred == 0:
        return 0.0
    score = math.exp(min(0.0, 1 - len_label / len_pred))  # brevity penalty
    for n in range(1, min(k, len_pred) + 1):
        pred_ngrams, label_ngrams = _ngrams(pred, n), _ngrams(label, n)
        matches = sum(min(count, label_ngrams[gram]) for gram, count in pred_ngrams.items())
        score *= (matches / (len_pred - n + 1)) ** (0.5 ** n)
    return score


def corpus_bleu(hypotheses: Sequence[str], references: Sequence[Sequence[str]]) -> float:
    """Corpus BLEU on the 0-100 scale, as computed by sacrebleu: the number the course reports.

    hypotheses: one string per sentence (a list of tokens is joined with spaces).
    references: one entry per hypothesis: the list of its reference strings (at least one; the count
    may differ from sentence to sentence, as the held-out sets of :func:`d2lhelpers.split_held_out`
    do). Scored lower-cased with ``tokenize="none"``: the sentences are already normalised and split
    on spaces by the data pipeline, so sacrebleu's own tokenizer must not split them again.

    Variable reference counts: sacrebleu takes references as "streams" (stream j holds the j-th
    reference of every sentence); a sentence with fewer references gets ``None`` in the remaining
    streams, which sacrebleu drops. (An empty string would not do: it counts as a reference of
    length 0 and changes the brevity penalty.)

    The formula is standard BLEU, not the teaching one: with p_n the clipped n-gram precision of the
    whole corpus (matches and n-grams summed over all sentences before dividing), c the total length
    of the hypotheses and r the total length of the references closest in length to each,

        BLEU = 100 * min(1, exp(1 - r / c)) * exp((log p_1 + log p_2 + log p_3 + log p_4) / 4),

    a geometric mean of the 1- to 4-gram precisions with equal weights, times a brevity penalty for
    the corpus as a whole. A corpus in which no hypothesis has 4 tokens scores 0 (its 4-gram
    precision is 0), unlike :func:`sentence_bleu`, which skips the orders a prediction is too short
    for.
    """
    from sacrebleu.metrics import BLEU  # imported here: the package's import stays quick

    hypotheses, streams = _hypotheses_and_streams(hypotheses, references)
    bleu = BLEU(lowercase=True, tokenize="none", force=True)
    return float(bleu.corpus_score(hypotheses, streams).score)


def _hypotheses_and_streams(hypotheses, references):
    """Check and convert to sacrebleu's layout: hypotheses as strings, references as streams."""
    hypotheses = [h if isinstance(h, str) else " ".join(h) for h in hypotheses]
    references = [[refs] if isinstance(refs, str) else list(refs) for refs in references]
    if len(hypotheses) != len(references):
        raise ValueError(
            f"hypotheses and references must have one entry per sentence, got {len(hypotheses)} "
            f"hypotheses and {len(references)} reference lists"
        )
    if not hypotheses:
        raise ValueError("corpus_bleu needs at least one sentence, got none")
    for i, refs in enumerate(references):
        if not refs or not all(isinstance(r, str) for r in refs):
            raise ValueError(f"references[{i}] must be a non-empty list of strings, got {refs!r}")
    num_streams = max(len(refs) for refs in references)
    # stream j: the j-th reference of every sentence, None where a sentence has fewer
    streams = [[refs[j] if j < len(refs) else None for refs in references]
               for j in range(num_streams)]
    return hypotheses, streams


class BleuComparison(NamedTuple):
    """Two systems' corpus BLEU on the same sentences, and whether they differ by more than chance.

    baseline, system: corpus BLEU (0-100). difference: system - baseline. p_value: the paired
    bootstrap's estimate of how often a difference at least this large (in either direction) would
    come from resampling the sentences alone; below 0.05 is the usual bar for "significant".
    baseline_interval, system_interval: 95% bootstrap intervals (low, high) of each score.
    """

    baseline: float
    system: float
    difference: float
    p_value: float
    baseline_interval: tuple[float, float]
    system_interval: tuple[float, float]


def paired_bleu_test(baseline_hypotheses: Sequence[str], system_hypotheses: Sequence[str],
                     references: Sequence[Sequence[str]], num_samples: int = 1000) -> BleuComparison:
    """Paired bootstrap resampling (Koehn, 2004) of two systems' translations of the same sentences,
    done by sacrebleu (``sacrebleu.significance.PairedTest``), scored as :func:`corpus_bleu` does.

    Draws ``num_samples`` test sets of the same size from the sentences, with replacement, scores
    both systems on each, and compares: the p-value and each system's 95% interval say how much of
    the difference could be the luck of the sentences drawn. It says nothing about the luck of
    training (another seed gives another model): compare several seeds for that. The resampling is
    seeded (sacrebleu's ``SACREBLEU_SEED``, 12345 by default): the same inputs give the same result.
    """
    from sacrebleu.metrics import BLEU
    from sacrebleu.significance import PairedTest

    check_int(num_samples, "num_samples")
    baseline_hypotheses, streams = _hypotheses_and_streams(baseline_hypotheses, references)
    system_hypotheses, _ = _hypotheses_and_streams(system_hypotheses, references)
    test = PairedTest([("baseline", baseline_hypotheses), ("system", system_hypotheses)],
                      {"BLEU": BLEU(lowercase=True, tokenize="none", force=True)}, streams,
                      test_type="bs", n_samples=num_samples)
    _, results = test()
    baseline, system = results["BLEU"]  # sacrebleu's Result: score, p_value, mean, ci (half-width)
    return BleuComparison(
        float(baseline.score), float(system.score), float(system.score - baseline.score),
        float(system.p_value),
        (float(baseline.mean - baseline.ci), float(baseline.mean + baseline.ci)),
        (float(system.mean - system.ci), float(system.mean + system.ci)))
