"""Unit tests of d2lhelpers.bleu: the teaching formula by hand, and the sacrebleu corpus score."""

from __future__ import annotations

import collections
import math

import pytest

import d2lhelpers as d2lh
from d2lhelpers.bleu import corpus_bleu, sentence_bleu

# --- sentence_bleu: the formula of the book -------------------------------------------------------


def test_identical_sentences_score_one_whatever_their_length():
    assert sentence_bleu("il est calme .".split(), "il est calme .".split()) == 1.0
    assert sentence_bleu(["va", "!"], ["va", "!"], k=4) == 1.0  # orders 3 and 4 are skipped
    assert sentence_bleu(["ok"], ["ok"], k=4) == 1.0
    assert sentence_bleu("il est calme .", "il est calme .") == 1.0  # strings are split


def test_empty_prediction_scores_zero():
    assert sentence_bleu([], ["va", "!"]) == 0.0
    assert sentence_bleu([], []) == 0.0
    assert sentence_bleu(["va"], []) == 0.0  # nothing to match: p_1 = 0


def test_brevity_penalty_computed_by_hand():
    # pred 3 tokens, label 6 tokens, every n-gram of the prediction matches: only the penalty is
    # left, exp(min(0, 1 - 6/3)) = exp(-1)
    assert sentence_bleu("a b c".split(), "a b c d e f".split(), k=2) == pytest.approx(math.exp(-1))
    # shorter than n: "va" against "va !" with k=4: only p_1 = 1 counts; penalty exp(1 - 2/1)
    assert sentence_bleu(["va"], ["va", "!"], k=4) == pytest.approx(math.exp(-1))
    # a longer prediction is not rewarded: min(0, 1 - 2/4) = 0, no penalty, but p_1 = 2/4
    assert sentence_bleu("a b x y".split(), "a b".split(), k=1) == pytest.approx((2 / 4) ** 0.5)


def test_clipped_precisions_and_weights_computed_by_hand():
    # pred "a b a c" (4), label "a b c a b" (5): penalty exp(1 - 5/4);
    # unigrams a:2 b:1 c:1 all match (label has a:2 b:2 c:1): p_1 = 4/4;
    # bigrams ab ba ac: only ab is in the label: p_2 = 1/3
    expected = math.exp(1 - 5 / 4) * 1.0 ** (1 / 2) * (1 / 3) ** (1 / 4)
    assert sentence_bleu("a b a c".split(), "a b c a b".split(), k=2) == pytest.approx(expected)
    # clipping: "the" matches at most once, as often as it occurs in the label: p_1 = 1/4
    assert sentence_bleu("the the the the".split(), "the cat".split(), k=1) == pytest.approx(0.5)
    # a label shorter than n (prediction not): p_3 = 0, so 0
    assert sentence_bleu("a b c".split(), "a b".split(), k=4) == 0.0


def test_sentence_bleu_agrees_with_the_books_code():
    def book_bleu(pred_seq, label_seq, k):  # d2l's bleu, verbatim but for names
        pred_tokens, label_tokens = pred_seq.split(" "), label_seq.split(" ")
        len_pred, len_label = len(pred_tokens), len(label_tokens)
        score = math.exp(min(0, 1 - len_label / len_pred))
        for n in range(1, min(k, len_pred) + 1):
            num_matches, label_subs = 0, collections.defaultdict(int)
            for i in range(len_label - n + 1):
                label_subs[" ".join(label_tokens[i: i + n])] += 1
            for i in range(len_pred - n + 1):
                if label_subs[" ".join(pred_tokens[i: i + n])] > 0:
                    num_matches += 1
                    label_subs[" ".join(pred_tokens[i: i + n])] -= 1
            score *= math.pow(num_matches / (len_pred - n + 1), math.pow(0.5, n))
        return score

    cases = [("go .", "va !"), ("il est calme .", "il est mouillé ."),
             ("je suis là .", "je suis chez moi ."), ("a b a b c", "a b c"),
             ("j'ai perdu .", "j'ai perdu ."), ("x", "x y z w v")]
    for pred, label in cases:
        for k in (1, 2, 3, 4):
            assert sentence_bleu(pred, label, k) == pytest.approx(book_bleu(pred, label, k))


def test_sentence_bleu_rejects_bad_k():
    for bad in (0, -1, 2.0, True):
        with pytest.raises(ValueError, match="k must"):
            sentence_bleu(["a"], ["a"], k=bad)


# --- corpus_bleu: sacrebleu -----------------------------------------------------------------------

def papineni_bleu(hypotheses, references, max_n=4):
    """Corpus BLEU by its definition (Papineni et al., 2002), 0-100: clipped n-gram counts against
    the most generous reference, closest reference length (ties: the shorter), sums over the corpus.
    """
    correct, total = [0] * max_n, [0] * max_n
    hyp_len = ref_len = 0
    for hyp, refs in zip(hypotheses, references, strict=True):
        h, rs = hyp.lower().split(), [r.lower().split() for r in refs]
        hyp_len += len(h)
        ref_len += min((abs(len(r) - len(h)), len(r)) for r in rs)[1]
        for n in range(1, max_n + 1):
            grams = collections.Counter(tuple(h[i:i + n]) for i in range(len(h) - n + 1))
            best = collections.Counter()
            for r in rs:
                best |= collections.Counter(tuple(r[i:i + n]) for i in range(len(r) - n + 1))
            correct[n - 1] += sum(min(c, best[g]) for g, c in grams.items())
            total[n - 1] += sum(grams.values())
    penalty = 1.0 if hyp_len >= ref_len else math.exp(1 - ref_len / hyp_len)
    log_precisions = [math.log(c / t) for c, t in zip(correct, total, strict=True)]
    return 100 * penalty * math.exp(sum(log_precisions) / max_n)


HYPOTHESES = ["il est très calme .", "je suis chez moi .", "nous avons gagné !", "c'est un chat .",
              "bien ."]
REFERENCES = [  # 2, 1, 3, 1 and 1 references: a variable count, as in the held-out set
    ["il est très calme .", "il est calme ."],
    ["je suis à la maison ."],
    ["nous l'avons emporté !", "on a gagné !", "nous avons gagné la partie !"],
    ["c'est un chat noir ."],
    ["c'est très bien , merci ."],
]


def test_corpus_bleu_identical_is_100_and_nothing_right_is_0():
    sentences = ["il est très calme .", "je suis chez moi maintenant .", "Nous avons gagné !"]
    assert corpus_bleu(sentences, [[s] for s in sentences]) == pytest.approx(100)
    # lower-cased
    assert corpus_bleu(sentences, [[s.upper(), "x"] for s in sentences]) == pytest.approx(100)
    assert corpus_bleu(["", ""], [["va !"], ["cours !"]]) == 0.0
    assert corpus_bleu(["x y z w"], [["a b c d"]]) == 0.0


def test_corpus_bleu_with_a_variable_number_of_references_agrees_with_the_definition():
    score = corpus_bleu(HYPOTHESES, REFERENCES)
    assert score == pytest.approx(papineni_bleu(HYPOTHESES, REFERENCES))
    assert 30 < score < 100


def test_corpus_bleu_agrees_with_sacrebleu_given_complete_reference_streams():
    import sacrebleu

    # Repeating a sentence's own reference to fill the missing slots changes no statistic (n-gram
    # counts are merged by maximum, the closest length is the same): sacrebleu called on complete
    # streams must give our number.
    width = max(len(refs) for refs in REFERENCES)
    filled = [refs + [refs[0]] * (width - len(refs)) for refs in REFERENCES]
    streams = [[refs[j] for refs in filled] for j in range(width)]
    expected = sacrebleu.corpus_bleu(HYPOTHESES, streams, lowercase=True, tokenize="none").score
    assert corpus_bleu(HYPOTHESES, REFERENCES) == pytest.approx(expected)

    # Filling with "" instead would be wrong: sacrebleu keeps an empty string as a reference of
    # length 0, which becomes the closest length for short hypotheses and changes the score.
    padded = [[refs[j] if j < len(refs) else "" for refs in REFERENCES] for j in range(width)]
    wrong = sacrebleu.corpus_bleu(HYPOTHESES, padded, lowercase=True, tokenize="none").score
    assert wrong != pytest.approx(expected)


def test_corpus_bleu_uses_every_reference():
    hypotheses = ["on a gagné la partie !", "il est très calme ."]
    first, second = "nous avons gagné la partie !", "on a gagné la partie !"
    only_first = corpus_bleu(hypotheses, [[first], ["il est très calme ."]])
    both = corpus_bleu(hypotheses, [[first, second], ["il est très calme ."]])
    assert only_first < both == pytest.approx(100)
    # the order of the references does not matter, nor whether a sentence's list is the longer one
    swapped = [["il est très calme ."], [second, first]]
    assert corpus_bleu(hypotheses[::-1], swapped) == pytest.approx(100)


def test_corpus_bleu_does_not_retokenize():
    # tokenize="none": our sentences are split on spaces already; sacrebleu's default tokenizer
    # would split "peut-être" and find a match the model did not make.
    hypothesis, reference = "il est peut-être là .", "il est peut - être là ."
    assert corpus_bleu([hypothesis], [[reference]]) < 60
    as_tokens = corpus_bleu([hypothesis.split()], [[reference]])
    assert as_tokens == corpus_bleu([hypothesis], [[reference]])


def test_corpus_bleu_rejects_bad_input():
    with pytest.raises(ValueError, match="one entry per sentence"):
        corpus_bleu(["a b"], [["a b"], ["c"]])
    with pytest.raises(ValueError, match=r"references\[1\]"):
        corpus_bleu(["a b", "c"], [["a b"], []])
    with pytest.raises(ValueError, match="at least one sentence"):
        corpus_bleu([], [])


def test_public_names_are_exported():
    assert d2lh.sentence_bleu is sentence_bleu and d2lh.corpus_bleu is corpus_bleu


def systems_of_known_quality(num_sentences=300, seed=0):
    """References, and a factory of systems that copy each reference with probability p and
    otherwise output as many random words."""
    import random

    rng = random.Random(seed)
    words = "le la un une chat chien maison voit grand petit noir blanc".split()
    references = [" ".join(rng.choices(words, k=rng.randint(4, 8))) for _ in range(num_sentences)]

    def system(p):
        return [r if rng.random() < p else " ".join(rng.choices(words, k=len(r.split())))
                for r in references]

    return [[r] for r in references], system


def test_paired_bleu_test_finds_no_difference_between_equally_good_systems():
    references, system = systems_of_known_quality()
    first, second = system(0.5), system(0.5)  # equally good, wrong on different sentences
    result = d2lh.paired_bleu_test(first, second, references)
    assert result.baseline == pytest.approx(corpus_bleu(first, references))
    assert result.system == pytest.approx(corpus_bleu(second, references))
    assert result.difference == pytest.approx(result.system - result.baseline)
    assert result.p_value > 0.05  # the difference is within what resampling the sentences gives
    for score, (low, high) in ((result.baseline, result.baseline_interval),
                               (result.system, result.system_interval)):
        assert low < score < high and high - low < 15


def test_paired_bleu_test_separates_a_clearly_better_system_from_noise():
    references, system = systems_of_known_quality()
    worse, better = system(0.3), system(0.7)
    result = d2lh.paired_bleu_test(worse, better, references)
    assert result.difference > 10 and result.p_value < 0.01
    assert result.system_interval[0] > result.baseline_interval[1]  # the intervals do not overlap
    varied = [refs + ["un autre"] * (i % 3) for i, refs in enumerate(references)]  # 1 to 3 each
    assert d2lh.paired_bleu_test(worse, better, varied).p_value < 0.01
    with pytest.raises(ValueError, match="one entry per sentence"):
        d2lh.paired_bleu_test(worse[:5], better, references)


def test_paired_bleu_test_is_the_two_sided_test_taught_computed_directly():
    """The test of notebook 08, section 6, written out with corpus_bleu on each resampled set."""
    import numpy as np

    references, system = systems_of_known_quality(num_sentences=60, seed=1)
    baseline, candidate = system(0.4), system(0.6)
    num_samples, seed = 200, 7
    result = d2lh.paired_bleu_test(baseline, candidate, references, num_samples=num_samples,
                                   seed=seed)
    draws = np.random.default_rng(seed).choice(len(baseline), size=(num_samples, len(baseline)))
    differences, baseline_scores, system_scores = [], [], []
    for drawn in draws:
        refs = [references[i] for i in drawn]
        baseline_scores.append(corpus_bleu([baseline[i] for i in drawn], refs))
        system_scores.append(corpus_bleu([candidate[i] for i in drawn], refs))
        differences.append(system_scores[-1] - baseline_scores[-1])
    delta = corpus_bleu(candidate, references) - corpus_bleu(baseline, references)
    mean = sum(differences) / num_samples
    at_least = sum(abs(d - mean) >= abs(delta) for d in differences)  # either sign
    assert result.difference == pytest.approx(delta)
    assert result.p_value == pytest.approx((1 + at_least) / (num_samples + 1))
    assert 0.01 < result.p_value < 0.9  # a case where the count is neither 0 nor everything
    for interval, scores in ((result.baseline_interval, baseline_scores),
                             (result.system_interval, system_scores),
                             (result.difference_interval, differences)):
        assert interval == pytest.approx(tuple(np.percentile(scores, [2.5, 97.5])))


def test_paired_bleu_test_draws_sacrebleus_test_sets_and_its_p_is_about_half():
    """sacrebleu's PairedTest draws the same test sets (seed 12345); its statistic, |differences|
    centred and one tail counted with >, gives half the two-sided p or less: here one passes the
    usual 0.05 bar by a little where the other is more than twice it."""
    import numpy as np
    from sacrebleu.metrics import BLEU
    from sacrebleu.significance import PairedTest

    from d2lhelpers.bleu import _hypotheses_and_streams, _resampled_scores

    references, system = systems_of_known_quality(num_sentences=300, seed=0)
    baseline, candidate = system(0.45), system(0.55)
    num_samples = 500
    result = d2lh.paired_bleu_test(baseline, candidate, references, num_samples=num_samples)
    base, sys_, base_samples, sys_samples = _resampled_scores(baseline, candidate, references,
                                                              num_samples, 12345)
    differences = np.abs(sys_samples - base_samples)
    sacrebleu_style = (1 + int(np.sum(differences - differences.mean() > abs(sys_ - base)))) / (
        num_samples + 1)
    hypotheses, streams = _hypotheses_and_streams(baseline, references)
    candidate_hypotheses, _ = _hypotheses_and_streams(candidate, references)
    _, scores = PairedTest([("baseline", hypotheses), ("system", candidate_hypotheses)],
                           {"BLEU": BLEU(lowercase=True, tokenize="none", force=True)}, streams,
                           test_type="bs", n_samples=num_samples)()
    theirs = scores["BLEU"][1]
    assert theirs.score == pytest.approx(result.system)
    assert theirs.mean == pytest.approx(sys_samples.mean())  # the same resampled test sets
    assert theirs.p_value == pytest.approx(sacrebleu_style)
    assert result.p_value > 0.1 and theirs.p_value < 0.06  # near the bar, where it matters
    assert result.p_value > 2 * theirs.p_value


def test_paired_bleu_test_rejects_bad_input():
    references, system = systems_of_known_quality(num_sentences=20)
    with pytest.raises(ValueError, match="num_samples"):
        d2lh.paired_bleu_test(system(0.5), system(0.5), references, num_samples=0)
