"""The runner of the exercise checks (d2lhelpers/exercises/runner.py): run_check fails helpfully
(the input, the learner's own value against the expected one, hints in steps), a failure shows
the learner's frames and no line of the checking code, and check_afresh grades with a copy of
the checks that no patch in the notebook reaches."""

import math
import pathlib
import sys
import warnings

import numpy as np
import pytest
import torch

import d2lhelpers as d2lh
import exercise_authoring as authoring
from d2lhelpers import exercises
from d2lhelpers.exercises import ExerciseCheckFailed, Symptom, run_check
from d2lhelpers.exercises.runner import check_afresh

ROOT = pathlib.Path(__file__).resolve().parents[1]
CHECKS = sorted(name for name in exercises.__all__ if name.startswith("check_"))


# run_check -----------------------------------------------------------------------------------

CASES = [("a 2x3 matrix", (torch.arange(6.0).reshape(2, 3),)), ("an empty row", (torch.zeros(1, 0),))]
HINTS = ("which axis?", "the last one: dim=-1")


def reference(x):
    return x.softmax(dim=-1)


def test_run_check_passes_a_correct_function(capsys):
    run_check("softmax", lambda x: torch.exp(x) / torch.exp(x).sum(-1, keepdim=True), CASES, reference)
    assert capsys.readouterr().out == "Correct: softmax passed all 2 checks.\n"


def test_run_check_shows_the_input_and_the_learners_own_value_against_the_expected_one():
    with pytest.raises(ExerciseCheckFailed) as failure:
        run_check("softmax", lambda x: x.softmax(dim=0), CASES, reference, hints=HINTS)
    message = str(failure.value)
    assert message.startswith("softmax is not right yet on input a 2x3 matrix: 6 of 6 values differ; "
                              "the largest difference at\nindex (1, 0): expected 0.0900306, got "
                              "0.952574.\n")
    assert "(0,\n" not in message
    assert "\n  input:    x=tensor (2, 3) float32: [[0, 1, 2], [3, 4, 5]]\n" in message
    assert "\n  expected: tensor (2, 3) float32: [[0.09003, 0.2447, 0.6652], [0.09003, 0.2447, 0.6652]]\n" in message
    assert "\n  got:      tensor (2, 3) float32: [[0.04743, 0.04743, 0.04743], [0.9526, 0.9526, 0.9526]]\n" in message
    assert failure.value.diagnosis is None


def test_the_full_values_are_shown_on_request_and_kept_on_the_error():
    with pytest.raises(ExerciseCheckFailed) as failure:
        run_check("softmax", lambda x: x.softmax(dim=0), CASES, reference, hints=HINTS)
    with pytest.raises(ExerciseCheckFailed) as full:
        run_check("softmax", lambda x: x.softmax(dim=0), CASES, reference, hints=HINTS, verbose=True)
    message = str(full.value)
    assert message == failure.value.details == full.value.details
    assert "input:    (tensor of shape (2, 3), dtype torch.float32:\n[[0. 1. 2.]\n [3. 4. 5.]])" in message
    assert "expected: tensor of shape (2, 3), dtype torch.float32:\n[[0.09   0.2447 0.6652]" in message
    assert "got:      tensor of shape (2, 3), dtype torch.float32:\n[[0.0474 0.0474 0.0474]" in message
    assert message.endswith("\n(For the answer, run the check again with hint=2.)")


def test_large_values_are_summarised_where_they_differ_and_fit_on_a_screen():
    with pytest.raises(ExerciseCheckFailed) as failure:
        run_check("double", lambda x: 3 * x, [("400 numbers", (torch.arange(400.0),))], lambda x: 2 * x)
    message = str(failure.value)
    assert "399 of 400 values differ; the largest difference at\nindex (399,): expected 798, got 1197." in message
    # the values shown are those around the largest difference, not the first ones
    assert ("\n  expected: tensor (400,) float32, at [394:400]: [788, 790, 792, 794, 796, 798]\n"
            in message)
    assert ("\n  got:      tensor (400,) float32, at [394:400]: [1182, 1185, 1188, 1191, 1194, "
            "1197]\n") in message
    assert message.count("\n") + 1 <= 15 and max(map(len, message.split("\n"))) <= 100
    with pytest.raises(ExerciseCheckFailed) as full:
        run_check("double", lambda x: 3 * x, [("400 numbers", (torch.arange(400.0),))], lambda x: 2 * x,
                  verbose=True)
    assert "got:      tensor of shape (400,), dtype torch.float32:\n[   0.    3.    6. ... 1191. 1194. 1197.]" in str(full.value)


def test_one_value_that_differs_is_named_with_its_place_and_an_infinity_is_no_nan():
    mask = [("T=2", (2,))]
    with pytest.raises(ExerciseCheckFailed) as failure:  # -inf is what a mask holds: no "NaN"
        run_check("mask", lambda T: torch.full((T, T), -math.inf).triu(0), mask,
                  lambda T: torch.full((T, T), -math.inf).triu(1))
    message = " ".join(str(failure.value).split())
    assert "2 of 4 values differ; the largest difference at index (0, 0): expected 0, got -inf." in message
    assert "NaN" not in message
    with pytest.raises(ExerciseCheckFailed, match=r"1 of 4 values differs, at index \(1, 0\): "
                                                 r"expected 0, got 1\."):
        run_check("mask", lambda T: torch.full((T, T), -math.inf).triu(1) + torch.tensor([[0.0, 0],
                                                                                      [1, 0]]),
                  mask, lambda T: torch.full((T, T), -math.inf).triu(1))
    with pytest.raises(ExerciseCheckFailed, match=r"the result holds NaN at 1 of 4 places \(the first "
                                                 r"at index\s\(0, 1\), where -inf was expected\)"):
        run_check("mask", lambda T: torch.full((T, T), math.nan).triu(1), mask,
                  lambda T: torch.full((T, T), -math.inf).triu(1))


def test_hints_nudge_first_and_tell_only_on_request():
    def failure(hint):
        with pytest.raises(ExerciseCheckFailed) as caught:
            run_check("softmax", lambda x: x.softmax(dim=0), CASES, reference, hints=HINTS, hint=hint)
        return str(caught.value)

    assert failure(1).endswith("\nHint: which axis?\n(For the answer, run the check again "
                               "with hint=2; for the values in full, verbose=True.)")
    assert failure(2).endswith("\nHint: which axis?\nHint 2 (the answer): the last one: "
                               "dim=-1\n(For the values in full, run the check again with "
                               "verbose=True.)")
    assert failure(5).endswith("\nHint 2 (the answer): the last one: dim=-1\n(For the values in "
                               "full, run the check again with verbose=True.)")
    with pytest.raises(ExerciseCheckFailed) as ladder:  # a step between the nudge and the answer
        run_check("softmax", lambda x: x.softmax(dim=0), CASES, reference, hint=2,
                  hints=("which axis?", "the keys' axis", "dim=-1"))
    assert str(ladder.value).endswith("\nHint 2: the keys' axis\n(For the answer, run the check "
                                      "again with hint=3; for the values in full, verbose=True.)")
    assert failure(0).endswith("[0.9526, 0.9526, 0.9526]]\n(For a hint, run the check again with "
                               "hint=1; for the values in full, verbose=True.)")
    for bad in (-1, 1.5, True):
        with pytest.raises(ValueError, match="hint must be a whole number >= 0"):
            run_check("softmax", reference, CASES, reference, hints=HINTS, hint=bad)


def test_a_check_compared_through_a_function_shows_the_learners_own_value():
    lengths = [("B=1, T=3", (1, 3))]
    through = ("passed to d2lh.masked_softmax as valid lengths",
               lambda lens, B, T: d2lh.masked_softmax(torch.zeros(B, T, T), lens))
    expected = lambda B, T: torch.arange(1, T + 1).expand(B, T)
    with pytest.raises(ExerciseCheckFailed) as failure:
        run_check("lens", lambda B, T: torch.arange(T).expand(B, T), lengths, expected,
                  compare_through=through)
    message = " ".join(str(failure.value).split())
    # the index points into the lengths the message shows, not into the weights they give
    assert ("3 of 3 values differ; the largest difference at index (0, 0): expected 1, got 0 (and "
            "passed to d2lh.masked_softmax as valid lengths, it gives other results)") in message
    assert "expected: tensor (1, 3) int64: [[1, 2, 3]]" in message
    assert "got: tensor (1, 3) int64: [[0, 1, 2]]" in message
    with pytest.raises(ExerciseCheckFailed, match="what it returned raised ValueError when passed"):
        run_check("lens", lambda B, T: torch.arange(T + 1), lengths, expected, compare_through=through)
    run_check("lens", lambda B, T: torch.arange(1, T + 1, dtype=torch.int32).expand(B, T),
              lengths, expected, compare_through=through)
    layer = [("a layer", (torch.ones(2, 3),))]
    with pytest.raises(ExerciseCheckFailed) as failure:  # results that are not values
        run_check("layer", lambda x: torch.nn.Identity(), layer, lambda x: torch.nn.Softmax(-1),
                  compare_through=("applied to x", lambda f, x: f(x)))
    assert ("what it returned, applied to x, does not give the expected result: 6 of 6 values "
            "differ in what it gives;") in " ".join(str(failure.value).split())


# Naming the mistake ----------------------------------------------------------------------------

SIZES = [("a 2x3 matrix", (torch.arange(6.0).reshape(2, 3),)),
         ("a 3x3 matrix", (torch.tensor([[0.3, -1.2, 2.0], [1.1, 0.4, -0.7], [-0.5, 0.9, 0.2]]),)),
         ("a row", (torch.tensor([[1.0, -1.0, 0.5, 2.0]]),))]
AXIS = "Your weights sum to 1 down each column: which axis does your softmax normalise?"
MISTAKES = {
    AXIS: lambda x: x.softmax(dim=0),
    "Your weights are not normalised.": lambda x: x.exp(),
    "Your weights are the sigmoid of the scores, or twice them.": (lambda x: x.sigmoid(),
                                                                  lambda x: 2 * x),
    "Your weights are negative somewhere.": Symptom(lambda got, x: bool((got < 0).any())),
}


def diagnosis(learner, mistakes=MISTAKES, cases=SIZES, **kwargs):
    with pytest.raises(ExerciseCheckFailed) as failure:
        run_check("softmax", learner, cases, reference, hints=HINTS, mistakes=mistakes, **kwargs)
    return failure.value


def test_a_known_mistake_is_named_first_in_its_own_sentence():
    failure = diagnosis(lambda x: x.softmax(dim=0))
    assert failure.diagnosis == AXIS
    assert str(failure).startswith(AXIS + "\nsoftmax is not right yet on input a 2x3 matrix: ")
    assert diagnosis(lambda x: torch.exp(x)).diagnosis == "Your weights are not normalised."
    assert diagnosis(lambda x: x + x).diagnosis.startswith("Your weights are the sigmoid")  # a variant
    assert diagnosis(lambda x: -x.softmax(dim=-1)).diagnosis == "Your weights are negative somewhere."


def test_a_mistake_is_named_only_if_it_explains_every_case():
    # right on the first case, like the softmax over the columns on the second only: no name
    def half_wrong(x):
        return x.softmax(dim=0) if x.shape[0] == 3 else x.softmax(dim=-1)

    failure = diagnosis(half_wrong)
    assert failure.diagnosis is None and str(failure).startswith("softmax is not right yet on input a 3x3")
    # the axis mistake, and another one on the last case
    assert diagnosis(lambda x: x.softmax(dim=0) * (1 if x.shape[0] > 1 else 3)).diagnosis is None
    # a symptom must show on every case that fails
    assert diagnosis(lambda x: x.softmax(dim=-1) - (x.shape[0] == 3)).diagnosis is None
    # no catalogue, or a mistake it does not hold: today's message
    assert diagnosis(lambda x: x.softmax(dim=0), mistakes=None).diagnosis is None
    assert diagnosis(lambda x: x.softmax(dim=-1) ** 2).diagnosis is None


@pytest.mark.parametrize("learner, sentence", [
    (lambda x: 2 * x.softmax(dim=-1), "Your result is the expected one times a constant (2 here)"),
    (lambda x: x.softmax(dim=-1) + 0.5, "Your result is the expected one plus a constant (0.5 here)"),
    (lambda x: x.softmax(dim=-1)[..., None], "Your result holds the expected values, in the shape "
                                             "(2, 3, 1) instead of (2, 3)"),
    (lambda x: x.softmax(dim=-1).T, "Your result is the expected one with its last two axes swapped"),
    (lambda x: x.softmax(dim=-1).tolist(), "Your result holds the expected values, as a list: "
                                           "return a tensor."),
])
def test_what_a_result_shares_with_the_expected_one_is_named_for_any_exercise(learner, sentence):
    failure = diagnosis(learner, mistakes=None)
    assert failure.diagnosis.startswith(sentence)
    assert " ".join(str(failure).split()).startswith(sentence)
    # a mistake of the catalogue comes first
    assert diagnosis(learner, mistakes={"Known.": learner}).diagnosis == "Known."


def test_results_in_another_order_and_a_part_of_a_tuple_are_named():
    cases = [("a 2x3 matrix", (torch.arange(6.0).reshape(2, 3),))]
    both = lambda x: (x.softmax(dim=-1), x.sum(dim=0))
    with pytest.raises(ExerciseCheckFailed) as failure:
        run_check("pair", lambda x: both(x)[::-1], cases, both)
    assert failure.value.diagnosis == ("Your results are the expected ones in another order (result 0 "
                                       "at place 1, result 1 at place 0).")
    with pytest.raises(ExerciseCheckFailed) as failure:
        run_check("pair", lambda x: (x.softmax(dim=-1), 3 * x.sum(dim=0)), cases, both)
    assert failure.value.diagnosis.startswith("Result 1: your result is the expected one times a "
                                              "constant (3 here)")
    # one number is always a factor times another: that alone names nothing
    with pytest.raises(ExerciseCheckFailed) as failure:
        run_check("total", lambda x: 3 * x.sum(), cases, lambda x: x.sum())
    assert failure.value.diagnosis is None


def test_a_function_that_raises_is_diagnosed_only_by_a_mistake_that_raises_there_too():
    def crashes_on_rows(x):
        if x.shape[0] == 2:
            raise IndexError("the learner's bug")
        return x.softmax(dim=0)

    # the same crash belongs to the mistake: named from the cases where both return
    failure = diagnosis(crashes_on_rows, mistakes={AXIS: crashes_on_rows})
    assert failure.diagnosis == AXIS and isinstance(failure.learner_error, IndexError)
    assert str(failure).startswith(AXIS + "\nsoftmax raised IndexError: the learner's bug\n  on input a 2x3")
    # a function making that mistake alone returns where this one raises: not named
    assert diagnosis(crashes_on_rows).diagnosis is None

    def always_crashes(x):
        raise IndexError("nothing to compare")

    assert diagnosis(always_crashes, mistakes={"Any crash.": always_crashes}).diagnosis is None


def test_recognising_a_mistake_reruns_the_function_quietly_and_leaves_the_random_state_alone(capsys):
    def noisy(x):
        print("debugging")
        warnings.warn("careful", UserWarning)
        return x.softmax(dim=0)

    torch.manual_seed(0)
    expected = torch.rand(2)
    torch.manual_seed(0)
    assert diagnosis(noisy).diagnosis == AXIS
    assert torch.equal(torch.rand(2), expected)
    assert capsys.readouterr().out == "debugging\nYour function warned: UserWarning: careful\n"


def test_a_function_that_modifies_its_input_is_told_so_in_one_sentence_and_nothing_else():
    def clobbers(x):
        result = x.softmax(dim=0)
        x.zero_()
        return result

    failure = diagnosis(clobbers, mistakes={"Never.": lambda x: x.softmax(dim=0)})
    assert failure.diagnosis.startswith("Your function changed what it was given, x (its values), "
                                        "and left it changed")
    assert "changed its input in place on input a 2x3 matrix: x (its values).\n" in str(failure)
    assert "Never." not in str(failure)


def test_a_function_that_changes_a_layer_it_was_given_fails_even_with_the_right_result():
    layer_cases = [("a linear layer", (torch.nn.Linear(3, 2), torch.ones(1, 3)))]

    def run(fn):
        with pytest.raises(ExerciseCheckFailed) as failure:
            run_check("zeroed", fn, layer_cases, lambda layer, x: layer(x) - layer.bias)
        return failure.value

    def zeroes_the_bias(layer, x):  # in place, never restored
        with torch.no_grad():
            layer.bias.zero_()
        return layer(x)

    def leaves_a_hook(layer, x):
        layer.register_forward_hook(lambda module, inputs, out: out - module.bias)
        return layer(x)

    def switches_the_mode(layer, x):
        return layer.eval()(x) - layer.bias

    for fn, what in ((zeroes_the_bias, "layer (its bias)"),
                     (leaves_a_hook, "layer (a hook left on itself)"),
                     (switches_the_mode, "layer (its mode (evaluation now))")):
        failure = run(fn)
        assert (f"changed its input in place on input a linear layer: {what}; its result itself "
                "is right.") in " ".join(str(failure).split())
        assert failure.diagnosis.startswith(f"Your function changed what it was given, {what}")
        assert "expected:" not in str(failure)


def test_mistakes_are_compared_through_compare_through_or_as_they_are_when_it_raises():
    cases = [("B=2, T=3", (2, 3)), ("B=3, T=4", (3, 4))]
    through = ("passed to d2lh.masked_softmax as valid lengths",
               lambda lens, B, T: d2lh.masked_softmax(torch.zeros(B, T, T), lens))
    mistakes = {"One short.": lambda B, T: torch.arange(T).expand(B, T),
                "One row.": lambda B, T: torch.arange(1, T + 1)}
    for learner, named in ((lambda B, T: torch.arange(T).repeat(B, 1).int(), "One short."),
                           (lambda B, T: torch.arange(1.0, T + 1), "One row.")):  # raises in through
        with pytest.raises(ExerciseCheckFailed) as failure:
            run_check("lens", learner, cases, lambda B, T: torch.arange(1, T + 1).expand(B, T),
                      compare_through=through, mistakes=mistakes)
        assert failure.value.diagnosis == named


def test_the_sentences_of_a_check_are_wrapped_to_the_width_of_a_message():
    long = "Your weights " + "are really quite wrong " * 10 + "indeed."
    failure = diagnosis(lambda x: x.softmax(dim=0), mistakes={long: lambda x: x.softmax(dim=0)})
    lines = str(failure).split("\n")
    assert max(map(len, lines)) <= 100 and " ".join(lines[:3]).startswith(long[:200])
    with pytest.raises(ValueError, match="predicate must be a function"):
        Symptom(3)


def test_run_check_reports_wrong_shapes_errors_and_missing_work():
    with pytest.raises(ExerciseCheckFailed, match=r"expected shape \(2, 3\), got shape \(2,\)"):
        run_check("softmax", lambda x: x.sum(-1), CASES, reference)
    with pytest.raises(ExerciseCheckFailed, match="raised IndexError"):
        run_check("softmax", lambda x: x[5], CASES, reference)

    def not_done(x):
        raise NotImplementedError()

    with pytest.raises(ExerciseCheckFailed, match="not implemented yet"):
        run_check("softmax", not_done, CASES, reference)

    def stub(x):
        raise d2lh.exercises.NotWrittenYet()  # what a student copy's stub raises

    with pytest.raises(ExerciseCheckFailed, match="softmax: not implemented yet"):
        run_check("softmax", stub, CASES, reference)

    def unsupported(x):  # PyTorch's own NotImplementedError is an error, not a stub
        raise NotImplementedError("not supported for this dtype")

    with pytest.raises(ExerciseCheckFailed, match="raised NotImplementedError: not supported"):
        run_check("softmax", unsupported, CASES, reference)


def test_run_check_catches_a_function_that_modifies_its_input():
    def right_answer_but_clobbers_input(x):
        result = reference(x)
        x.zero_()
        return result

    with pytest.raises(ExerciseCheckFailed, match=r"changed its input in place on input a 2x3 "
                                                  r"matrix: x \(its values\); its result itself"):
        run_check("softmax", right_answer_but_clobbers_input, CASES, reference)


def test_warnings_of_the_learners_function_go_to_standard_output(capsys):
    import warnings

    def warns(x):
        warnings.warn("careful", UserWarning)
        return reference(x)

    run_check("softmax", warns, CASES, reference)
    captured = capsys.readouterr()
    assert captured.out == ("Your function warned: UserWarning: careful\n"
                            "Correct: softmax passed all 2 checks.\n")
    assert captured.err == "", "nbgrader grades a test cell with standard-error output 0"


def test_failed_checks_are_assertion_errors_for_nbgrader():
    assert issubclass(ExerciseCheckFailed, AssertionError)


def test_run_check_compares_arrays_numbers_and_tuples(capsys):
    cases = [("a 2x2 array", (np.array([[1.0, 2.0], [3.0, 4.0]]),))]
    run_check("pair", lambda a: (a.sum(), a * 2), cases, lambda a: (a.sum(), a * 2))
    assert capsys.readouterr().out == "Correct: pair passed all 1 checks.\n"
    with pytest.raises(ExerciseCheckFailed, match=r"result 1 of the tuple: 4 of 4 values differ"):
        run_check("pair", lambda a: (a.sum(), a * 3), cases, lambda a: (a.sum(), a * 2))
    with pytest.raises(ExerciseCheckFailed, match=r"expected a tuple of 2 results"):
        run_check("pair", lambda a: a.sum(), cases, lambda a: (a.sum(), a * 2))
    with pytest.raises(ExerciseCheckFailed, match=r"expected 10, got 11"):
        run_check("total", lambda a: float(a.sum() + 1), cases, lambda a: a.sum())
    with pytest.raises(ExerciseCheckFailed, match=r"changed its input in place"):
        run_check("total", lambda a: (a.sum(), a.fill(0))[0], cases, lambda a: a.sum())


def test_run_check_wants_float64_results_for_float64_inputs():
    cases = [("float64", (torch.ones(2, 3, dtype=torch.float64),))]
    with pytest.raises(ExerciseCheckFailed, match="expected dtype float64"):
        run_check("softmax", lambda x: reference(x).float(), cases, reference)
    run_check("softmax", lambda x: reference(x.float()).double(), cases, reference)


def test_run_check_rejects_a_learner_fn_that_is_not_a_function():
    with pytest.raises(ValueError, match="learner_fn must be a function, got int"):
        run_check("softmax", 3, CASES, reference)


# What a learner sees in Jupyter ----------------------------------------------------------------

def checking_code_lines() -> set[str]:
    """The lines of the checking code that could give an answer away."""
    return {line.strip() for path in (ROOT / "d2lhelpers" / "exercises").glob("*.py")
            for line in path.read_text().splitlines() if len(line.strip()) > 12}


def test_a_failure_shows_no_line_of_the_checking_code_but_the_learners_own_frames():
    def helper(x):
        return x[len(x)]  # the learner's bug

    def loo_error(x, y, width):
        return helper(x)

    def with_itself(x, y, width):  # the point among its own keys
        weights = torch.softmax(-((x[:, None] - x[None, :]) / width) ** 2 / 2, dim=1)
        return ((weights @ y - y) ** 2).mean()

    renderings = []
    for wrong in (loo_error, with_itself):
        with pytest.raises(ExerciseCheckFailed) as failure:
            exercises.check_loo_error(wrong)
        rendered = "\n".join(failure.value._render_traceback_())
        assert rendered.endswith(f"ExerciseCheckFailed: {failure.value}")
        renderings.append(rendered)
    raised, wrong_value = renderings
    assert "in helper\n    return x[len(x)]  # the learner's bug" in raised
    assert "IndexError: index 2 is out of bounds" in raised
    assert wrong_value.startswith("ExerciseCheckFailed: Your point i is among its own keys")
    for rendered in renderings:
        leaked = [line for line in rendered.splitlines() if line.strip() in checking_code_lines()]
        assert not leaked and "exercises/" not in rendered, leaked


# Hidden tests that cannot be patched away ----------------------------------------------------

def always_correct(*args, **kwargs):
    print("Correct")


@pytest.fixture
def patched_checks(monkeypatch):
    """The checking code replaced as a solution cell could: issue 14's one line, and more."""
    monkeypatch.setattr(d2lh.exercises, "run_check", always_correct)
    for name in CHECKS:
        monkeypatch.setattr(d2lh.exercises, name, always_correct)
    for name, module in list(sys.modules.items()):
        if name.startswith("d2lhelpers.exercises."):
            monkeypatch.setattr(module, "run_check", always_correct, raising=False)


def loo_error(x, y, width):  # a right answer
    scores = -((x[:, None] - x[None, :]) / width) ** 2 / 2
    weights = torch.softmax(scores.fill_diagonal_(-math.inf), dim=1)
    return ((weights @ y - y) ** 2).mean()


def test_check_afresh_grades_with_a_copy_that_the_patches_do_not_reach(patched_checks, capsys):
    def unsolved(x, y, width):
        raise d2lh.exercises.NotWrittenYet()  # the copy's stub: a class the private copy lacks

    d2lh.exercises.check_loo_error(unsolved)
    assert capsys.readouterr().out == "Correct\n"  # the visible check is fooled
    with pytest.raises(AssertionError, match="loo_error.*not implemented yet"):
        check_afresh("check_loo_error", unsolved)
    check_afresh("check_loo_error", loo_error)
    assert capsys.readouterr().out == "", "a hidden test passes quietly: the visible check spoke"
    check_afresh("check_loo_error", loo_error, quiet=False)
    assert capsys.readouterr().out == "Correct: loo_error passed all 6 checks.\n"

    def warns(x, y, width):
        warnings.warn("a warning of the learner's function")
        return torch.tensor(0.0)

    with pytest.raises(AssertionError):
        check_afresh("check_loo_error", warns)
    assert "a warning of the learner's function" in capsys.readouterr().out, "shown on a failure"
    assert not [name for name in sys.modules if "afresh" in name], "the copy is not left behind"
    with pytest.raises(ValueError, match="check must name a check of d2lhelpers.exercises, got 'run_check'"):
        check_afresh("run_check", always_correct)


def test_the_generated_hidden_tests_fail_an_unsolved_exercise_despite_the_patch(patched_checks, capsys):
    cell = "d2lh.exercises.check_loo_error(loo_error)\n" + authoring.hidden_tests_source(
        [("check_loo_error", "loo_error")])
    namespace = {"d2lh": d2lh, "loo_error": lambda x, y, width: torch.tensor(0.0)}
    with pytest.raises(AssertionError, match="not right yet on input"):
        exec(cell, namespace)
    assert capsys.readouterr().out == "Correct\n"
    namespace["loo_error"] = loo_error
    exec(cell, namespace)
    assert capsys.readouterr().out == "Correct\n", "the hidden tests pass quietly"


# The stub of a student copy ------------------------------------------------------------------

class Layer:
    def forward(self, x):
        raise d2lh.exercises.NotWrittenYet()


def test_a_stub_names_its_function_and_says_where_to_write_it():
    with pytest.raises(NotImplementedError) as raised:
        Layer().forward(1)
    error = raised.value
    assert isinstance(error, d2lh.exercises.NotWrittenYet) and error.function == "Layer.forward"
    assert str(error) == ("`Layer.forward` is an exercise still to write (where it says YOUR CODE "
                          "HERE): write it, run its cell, then this one.")
    assert error._render_traceback_() == [  # called from this test's function, not from a cell
        "NotWrittenYet: `Layer.forward` is an exercise still to write.",
        "Write it in its exercise cell above (where it says YOUR CODE HERE), run that cell, then "
        "this one."]
    namespace = {"d2lh": d2lh}
    with pytest.raises(NotImplementedError) as raised:  # a stub run in the cell that holds it
        exec(compile("def f():\n    raise d2lh.exercises.NotWrittenYet()\nf()", "<cell>", "exec"),
             namespace)
    assert raised.value._render_traceback_()[1] == \
        "Write it in this cell (where it says YOUR CODE HERE), then run the cell again."
    with pytest.raises(NotImplementedError) as raised:  # outside a function
        exec("raise d2lh.exercises.NotWrittenYet()", namespace)
    assert raised.value.function is None
    assert raised.value._render_traceback_()[0] == "NotWrittenYet: this is an exercise still to write."
