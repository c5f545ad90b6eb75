"""BLEU: the teaching formula of *Dive into Deep Learning*, and the corpus score we report.

Two numbers, two purposes:

- :func:`sentence_bleu` is the formula taught in the course, written out so a learner can read it;
  it scores one prediction against one label, between 0 and 1.
- :func:`corpus_bleu` is the number the course reports for a model: standard corpus-level BLEU
  (Papineni et al., 2002) computed by sacrebleu over all held-out sentences, each with all of its
  references, on the 0-100 scale.

And one question: is a difference between two systems' BLEU on the same sentences more than the
luck of which sentences were drawn? :func:`paired_bleu_test` answers with a two-sided paired
bootstrap test, on sacrebleu's per-sentence statistics.
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
    bootstrap's two-sided p-value, the share of resampled test sets whose difference, centred on 0,
    is at least |difference| in size (either sign); below 0.05 is the usual bar for "significant".
    baseline_interval, system_interval, difference_interval: 95% bootstrap percentile intervals
    (low, high) of each score and of the difference.
    """

    baseline: float
    system: float
    difference: float
    p_value: float
    baseline_interval: tuple[float, float]
    system_interval: tuple[float, float]
    difference_interval: tuple[float, float]


def _resampled_scores(baseline_hypotheses, system_hypotheses, references, num_samples, seed):
    """Both systems' corpus BLEU on the sentences and on ``num_samples`` resampled test sets.

    Returns (baseline, system, baseline_samples, system_samples), the samples numpy arrays of shape
    (num_samples,). Each test set draws as many sentences as there are, with replacement, the same
    sentences for both systems; sacrebleu's per-sentence statistics (n-gram matches and counts,
    lengths) are summed over the drawn sentences and scored, which equals corpus BLEU of the drawn
    sentences. The draws are those of sacrebleu's own paired bootstrap for the same seed.
    """
    import numpy as np
    from sacrebleu.metrics import BLEU

    check_int(num_samples, "num_samples")
    if num_samples < 1:
        raise ValueError(f"num_samples must be at least 1, got {num_samples}")
    baseline_hypotheses, streams = _hypotheses_and_streams(baseline_hypotheses, references)
    system_hypotheses, _ = _hypotheses_and_streams(system_hypotheses, references)
    if len(system_hypotheses) != len(baseline_hypotheses):
        raise ValueError(f"the two systems must translate the same sentences, got "
                         f"{len(baseline_hypotheses)} and {len(system_hypotheses)} hypotheses")
    metric = BLEU(lowercase=True, tokenize="none", force=True)
    # (sentences, statistics) each: hypothesis and reference length, matches and totals per order
    stats = [np.array(metric._extract_corpus_statistics(hypotheses, streams), dtype=np.int64)
             for hypotheses in (baseline_hypotheses, system_hypotheses)]
    rng = np.random.default_rng(seed)
    draws = rng.choice(len(baseline_hypotheses), size=(num_samples, len(baseline_hypotheses)),
                       replace=True)  # (num_samples, sentences): the same call as sacrebleu's

    def score(summed):
        return float(metric._compute_score_from_stats(list(summed)).score)

    observed = [score(s.sum(0)) for s in stats]
    samples = [np.array([score(s[d].sum(0)) for d in draws]) for s in stats]
    return observed[0], observed[1], samples[0], samples[1]


def paired_bleu_test(baseline_hypotheses: Sequence[str], system_hypotheses: Sequence[str],
                     references: Sequence[Sequence[str]], num_samples: int = 1000,
                     seed: int = 12345) -> BleuComparison:
    """Paired bootstrap resampling (Koehn, 2004) of two systems' translations of the same sentences,
    scored as :func:`corpus_bleu` does: the test notebook 08 (section 6) teaches.

    1. The observed difference: delta = BLEU(system) - BLEU(baseline) on all the sentences.
    2. Draw ``num_samples`` test sets of as many sentences, with replacement, the same draws for
       both systems, and score both on each: the differences delta_b spread around delta.
    3. Centre them on 0 (subtract their mean): how the differences would spread were the two
       systems equally good.
    4. p = (1 + #{b : |delta_b - mean| >= |delta|}) / (num_samples + 1), two-sided. The +1 counts
       the observed test set among the draws, so p is never 0 (at least 1 / (num_samples + 1)).

    The intervals are the 2.5th and 97.5th percentiles of the resampled scores and differences.
    The test says how much of the difference could be the luck of the sentences drawn; it says
    nothing about the luck of training (another seed gives another model): compare several seeds
    for that. ``seed`` seeds the draws: the same inputs give the same result.

    How it relates to sacrebleu's ``PairedTest(test_type="bs")``, which draws the same test sets
    (for sacrebleu's default seed 12345): sacrebleu takes the absolute differences |delta_b| first,
    centres those on their mean, and counts one tail, (1 + #{b : |delta_b| - mean |delta_b| >
    |delta|}) / (num_samples + 1). Where the resampled differences keep one sign its p is about half
    the two-sided p computed here, and where some change sign, often less than half (centring the
    absolute values shifts them less than centring the signed ones): sacrebleu's 0.05 can be a
    two-sided 0.1.
    """
    import numpy as np

    baseline, system, baseline_samples, system_samples = _resampled_scores(
        baseline_hypotheses, system_hypotheses, references, num_samples, seed)
    difference = system - baseline
    differences = system_samples - baseline_samples  # (num_samples,)
    centred = differences - differences.mean()  # as if the two systems were equally good
    p_value = (1 + int(np.sum(np.abs(centred) >= abs(difference)))) / (num_samples + 1)

    def interval(samples):
        low, high = np.percentile(samples, [2.5, 97.5])
        return float(low), float(high)

    return BleuComparison(baseline, system, difference, p_value, interval(baseline_samples),
                          interval(system_samples), interval(differences))
