"""The inputs of the exercise checks (d2lhelpers/exercises/cases.py): drawn from the seed alone,
the global random state untouched, and the helpers the check modules share."""

import pytest
import torch
from torch import nn

import d2lhelpers as d2lh
from d2lhelpers import exercises
from d2lhelpers.exercises import cases
from test_checks_nadaraya_watson import loo_error


def test_checks_draw_other_cases_with_another_seed(capsys):
    seen = []

    def recording(x, y, width):
        seen.append((len(x), width))
        return loo_error(x, y, width)

    for seed in (0, 1):
        exercises.check_loo_error(recording, seed=seed)
    half = len(seen) // 2
    assert seen[:4] == seen[half:half + 4]  # the fixed edge cases
    assert seen[4:half] != seen[half + 4:]  # the random ones
    with pytest.raises(ValueError, match="seed must be an int"):
        exercises.check_loo_error(loo_error, seed="0")


def test_draws_depend_on_the_seed_only():
    def draws(seed):
        generator = cases.seeded_generator(seed)
        return (cases.random_sizes(generator, 2, B=(1, 3), T=(1, 9)),
                cases.random_floats(generator, 2, low=0.2, scale=2),
                cases.random_choice(generator, cases.MASK_KINDS))

    torch.manual_seed(5)
    first = draws(0)
    assert draws(0) == first != draws(1)
    sizes, floats, _ = first
    assert all(1 <= s["B"] <= 3 and 1 <= s["T"] <= 9 for s in sizes)
    assert all(0.2 <= x < 2.2 for x in floats)
    with pytest.raises(ValueError, match="seed must be an int, got True"):
        cases.seeded_generator(True)


def test_a_choice_among_one_option_still_draws():
    # so that a check's later draws do not depend on how many kinds it offers
    generator, fresh = cases.seeded_generator(0), cases.seeded_generator(0)
    assert cases.random_choice(generator, (None,)) is None
    after_choice, fresh_draws = (cases.randint(g, 0, 10**6, (4,)) for g in (generator, fresh))
    assert not torch.equal(after_choice, fresh_draws)


def test_head_sizes_put_d_model_first_and_h_divides_it():
    for s in cases.random_head_sizes(cases.seeded_generator(0), 5, d_k=(1, 4), h=(1, 4), B=(1, 3)):
        assert list(s) == ["d_model", "h", "B"] and s["d_model"] % s["h"] == 0


def test_random_lengths_per_sequence_per_query_and_a_row_with_no_valid_key():
    generator = cases.seeded_generator(0)
    per_sequence = cases.random_lengths(generator, 4, 6)
    per_query = cases.random_lengths(generator, 4, 6, T_q=3)
    zero = cases.random_lengths(generator, 4, 6, zero=True)
    assert per_sequence.shape == (4,) and per_query.shape == (4, 3) and zero.shape == (4,)
    for lengths in (per_sequence, per_query, zero[1:]):
        assert ((1 <= lengths) & (lengths <= 6)).all()
    assert zero[0] == 0


@pytest.mark.parametrize("kind, words, cross_words", [
    (None, "no valid_lens", "no valid_lens"),
    ("per sequence", "valid_lens (B,)", "valid_lens (B,)"),
    ("per query", "valid_lens (B, T)", "valid_lens (B, T_q)"),
    ("zero", "a sequence with valid length 0", "a sequence with valid length 0"),
])
def test_valid_lens_case_draws_lengths_of_its_kind_and_names_them(kind, words, cross_words):
    valid_lens, said = cases.valid_lens_case(cases.seeded_generator(0), kind, 2, 5)
    _, said_cross = cases.valid_lens_case(cases.seeded_generator(0), kind, 2, 5, 7)
    assert (said, said_cross) == (words, cross_words)
    if kind is None:
        assert valid_lens is None
    else:  # the draws of random_lengths, from the same seed
        generator = cases.seeded_generator(0)
        expected = cases.random_lengths(generator, 2, 5, 5 if kind == "per query" else None,
                                        zero=kind == "zero")
        assert torch.equal(valid_lens, expected)


def test_a_causal_case_is_the_packages_causal_lengths():
    valid_lens, said = cases.valid_lens_case(cases.seeded_generator(0), "causal", 3, 4)
    assert torch.equal(valid_lens, d2lh.causal_valid_lens(3, 4))
    assert said == "valid_lens (B, T) = 1..T"


def test_seeded_module_has_the_seeds_weights_in_eval_mode_and_leaves_the_global_stream():
    torch.manual_seed(123)
    expected = torch.rand(3)
    torch.manual_seed(123)
    a = cases.seeded_module(cases.seeded_generator(0), nn.Linear, 4, 3)
    assert torch.equal(torch.rand(3), expected), "the constructor's draws are forked away"
    b = cases.seeded_module(cases.seeded_generator(0), nn.Linear, 4, 3)
    c = cases.seeded_module(cases.seeded_generator(1), nn.Linear, 4, 3)
    assert not a.training
    assert torch.equal(a.weight, b.weight) and torch.equal(a.bias, b.bias)
    assert not torch.equal(a.weight, c.weight)


def test_load_linear_weights_copies_or_says_what_the_module_needs_before_copying():
    class Module(nn.Module):
        def __init__(self, width):
            super().__init__()
            self.W_q, self.W_o = nn.Linear(4, 4, bias=False), nn.Linear(4, width, bias=False)

    weights = {"W_q": torch.ones(4, 4), "W_o": 2 * torch.ones(4, 4)}
    module = Module(4)
    cases.load_linear_weights(module, weights)
    assert torch.equal(module.W_q.weight, weights["W_q"])
    assert torch.equal(module.W_o.weight, weights["W_o"])
    wrong = Module(5)
    before = wrong.W_q.weight.clone()
    with pytest.raises(TypeError, match=r"needs W_o = nn.Linear with weight of shape \(4, 4\) "
                                        r"\(a note\), got Linear\(in_features=4, out_features=5"):
        cases.load_linear_weights(wrong, weights, note=" (a note)")
    assert torch.equal(wrong.W_q.weight, before), "nothing copied"
    with pytest.raises(TypeError, match="needs W_k = nn.Linear .*, got None"):
        cases.load_linear_weights(module, {"W_k": torch.ones(4, 4)})


def test_feed_in_chunks_feeds_the_chunks_in_order_with_one_cache_and_concatenates():
    X = torch.arange(2 * 6 * 3.0).reshape(2, 6, 3)
    seen = []

    def step(x, cache):  # outputs x shifted by the number of positions cached before it
        seen.append((x.shape[1], len(cache)))
        offset = len(cache)
        cache.append(x[:, None], x[:, None])  # (B, 1, T_new, d)
        return x + offset

    outputs, cache = cases.feed_in_chunks(step, X, (1, 3, 2))
    assert seen == [(1, 0), (3, 1), (2, 4)]
    offsets = torch.tensor([0, 1, 1, 1, 4, 4.0])[None, :, None]
    assert torch.equal(outputs, X + offsets) and torch.equal(cache.keys[:, 0], X)


def test_labelled_cases_say_what_is_special_then_the_details():
    entries = [("a single query", (1, 5)), ("", (3, 4))]
    assert cases.labelled(entries, lambda T_q, T_k: f"T_q={T_q}, T_k={T_k}") == [
        ("a single query, T_q=1, T_k=5", (1, 5)), ("T_q=3, T_k=4", (3, 4))]
