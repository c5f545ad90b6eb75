"""The tests every exercise check gets, and what the answers of several test files share.

A test file ``test_checks_<topic>.py`` tests the checks of
``d2lhelpers/exercises/checks_<topic>.py``. It holds, for each check, one correct solution
(written independently of the check's reference), then the mistakes a learner is likely to make
(forgetting the mask or the scaling, the wrong axis, the wrong transpose, ...), in a table::

    CHECKS = {"check_x": (right_answer, {
        "a mistake": (wrong_answer, "what its failure mentions", "its diagnosis" or None)})}

"its diagnosis" is a part of the one sentence of the check's catalogue of mistakes
(``MODULE.MISTAKES["check_x"]``) that must lead the failure's message, or None when the check
must not recognise the mistake. A class ``TestChecks(CheckTests)`` names the table and the module,
which gives every check the tests below: a right answer passes; each wrong answer raises
ExerciseCheckFailed with a message that names the input it failed on, starts with its diagnosis
and no other, fits on a screen and ends with the check's hint; every diagnosis of the catalogue is
the one of some wrong answer; and so on.
"""

from __future__ import annotations

import inspect
import re
import unicodedata

import pytest
import torch

import d2lhelpers as d2lh
from d2lhelpers import exercises
from d2lhelpers.exercises import ExerciseCheckFailed, runner


class CheckTests:
    """The tests of a table of checks (``CHECKS``), those of the module ``MODULE``."""

    CHECKS: dict = {}
    MODULE = None

    def pytest_generate_tests(self, metafunc):  # pytest calls it for every test of the class
        if "mistake" in metafunc.fixturenames:
            wrong = [(check, mistake) for check, (_, mistakes) in sorted(self.CHECKS.items())
                     for mistake in mistakes]
            metafunc.parametrize("check, mistake", wrong, ids=[f"{c}-{m}" for c, m in wrong])
        elif "check" in metafunc.fixturenames:
            metafunc.parametrize("check", sorted(self.CHECKS))

    def test_the_table_holds_every_check_of_the_module(self):
        assert set(self.CHECKS) == set(self.MODULE.__all__) == set(self.MODULE.MISTAKES)

    @pytest.mark.parametrize("seed", [0, 1])
    def test_check_passes_a_right_answer(self, check, seed, capsys):
        right, _ = self.CHECKS[check]
        getattr(exercises, check)(right, seed=seed)
        line = capsys.readouterr().out
        assert line.startswith("Correct: ") and line.endswith(" checks.\n")
        assert line.count("\n") == 1
        getattr(exercises, check)(right, seed=seed, model_answer=True)
        assert capsys.readouterr().out == (f"✓ the model answer passes {check}; try yours in the "
                                           "student copy\n")

    def diagnosis_of(self, check, mistake) -> str | None:
        """The sentence of the catalogue that the table says names ``mistake`` (None: none; a
        part starting with "~": a sentence of the runner's own, for any exercise)."""
        part = self.CHECKS[check][1][mistake][2]
        if part is None or part.startswith("~"):
            return part
        sentences = [s for s in self.MODULE.MISTAKES[check] if part in s]
        assert len(sentences) == 1, f"{part!r} must be part of one sentence, found {sentences}"
        return sentences[0]

    def test_check_fails_a_plausible_wrong_answer_naming_the_input_and_the_mistake(
            self, check, mistake, capsys):
        """The message names the input, starts with the mistake's diagnosis (if the check knows
        it) and no other, fits on a screen and ends with the hint."""
        wrong, must_mention, _ = self.CHECKS[check][1][mistake]
        with pytest.raises(ExerciseCheckFailed) as failure:
            getattr(exercises, check)(wrong)
        message = str(failure.value)
        words = " ".join(message.split())  # the message, unwrapped
        assert must_mention in words
        assert "on input " in message and "\nHint: " in message
        assert "Correct" not in capsys.readouterr().out
        expected = self.diagnosis_of(check, mistake)
        if expected is not None and expected.startswith("~"):  # the runner's generic sentence
            assert expected[1:] in failure.value.diagnosis
            assert failure.value.diagnosis not in self.MODULE.MISTAKES[check]
            expected = failure.value.diagnosis
        assert failure.value.diagnosis == expected
        if expected is not None:
            assert words.startswith(" ".join(expected.split()) + " ")
        assert not [s for s in self.MODULE.MISTAKES[check] if s != expected and s in words]
        assert message.count("\n") + 1 <= MAX_LINES, message
        assert max(map(len, message.split("\n"))) <= 100

    def test_in_chinese_the_same_mistake_is_named_and_the_message_is_chinese(
            self, check, mistake, chinese):
        """With the Chinese notebooks' switch on, the same wrong answer fails with the Chinese of
        the same diagnosis (from the catalogue, not the English), and the message's own words,
        the hint and the labels are Chinese; it still fits on a screen."""
        wrong, _, _ = self.CHECKS[check][1][mistake]
        with pytest.raises(ExerciseCheckFailed) as failure:
            getattr(exercises, check)(wrong)
        message = str(failure.value)
        expected = self.diagnosis_of(check, mistake)
        if expected is not None and not expected.startswith("~"):
            assert failure.value.diagnosis == chinese(expected) != expected
        if failure.value.diagnosis is not None:
            assert HAN.search(failure.value.diagnosis), failure.value.diagnosis
            assert message.startswith(failure.value.diagnosis.split("\n")[0][:20])
        lines = message.split("\n")
        head = lines[runner._wrap(failure.value.diagnosis).count("\n") + 1
                     if failure.value.diagnosis else 0]
        assert HAN.search(head), f"the failure's first line is not Chinese: {head}"
        assert "\n提示：" in message and "\nHint" not in message
        assert "  输入：" in message and "input:" not in message
        assert message.count("\n") + 1 <= MAX_LINES + 2, message
        assert max(map(columns, lines)) <= 100, message

    def test_in_chinese_a_right_answer_and_the_model_answer_are_told_in_chinese(
            self, check, chinese, capsys):
        right, _ = self.CHECKS[check]
        getattr(exercises, check)(right)
        getattr(exercises, check)(right, model_answer=True)
        correct, model_answer = capsys.readouterr().out.splitlines()
        assert HAN.search(correct) and "Correct" not in correct
        assert model_answer.startswith("✓") and check in model_answer and HAN.search(model_answer)

    def test_every_diagnosis_is_that_of_a_wrong_answer(self, check):
        named = {self.diagnosis_of(check, mistake) for mistake in self.CHECKS[check][1]}
        named = {s for s in named if s is None or not s.startswith("~")}
        assert set(self.MODULE.MISTAKES[check]) <= named

    def test_the_values_are_shown_in_full_on_request(self, check):
        wrong = next(iter(self.CHECKS[check][1].values()))[0]
        with pytest.raises(ExerciseCheckFailed) as failure:
            getattr(exercises, check)(wrong)
        with pytest.raises(ExerciseCheckFailed) as full:
            getattr(exercises, check)(wrong, verbose=True)
        assert str(full.value) == failure.value.details == full.value.details
        assert "verbose=True" in str(failure.value) and "verbose=True" not in str(full.value)

    @pytest.mark.parametrize("stub_error", [exercises.NotWrittenYet, NotImplementedError],
                             ids=["our stub", "nbgrader's default stub"])
    def test_a_stub_is_reported_as_not_implemented(self, check, stub_error):
        def stub(*args):
            raise stub_error()

        with pytest.raises(ExerciseCheckFailed, match="not implemented yet"):
            getattr(exercises, check)(stub)

    def test_checks_leave_the_global_random_state_alone(self, check):
        torch.manual_seed(123)
        expected = torch.rand(3)
        torch.manual_seed(123)
        getattr(exercises, check)(self.CHECKS[check][0])
        assert torch.equal(torch.rand(3), expected)

    def test_every_check_gives_its_hints_in_steps(self, check):
        """A nudge by default; with hint=2 a second, more specific step, not yet the answer; the
        last step alone says it gives the answer."""
        function = getattr(exercises, check)
        parameters = inspect.signature(function).parameters
        assert list(parameters)[1:] == ["seed", "hint", "verbose", "model_answer"]
        assert parameters["verbose"].kind == inspect.Parameter.KEYWORD_ONLY
        messages = []
        for hint in range(1, 6):
            with pytest.raises(ExerciseCheckFailed) as failure:
                function(lambda *args: None, hint=hint)
            messages.append(" ".join(str(failure.value).split(" ")))
        nudge = re.search(r"\nHint: (.*?)\n\(For ", messages[0], re.DOTALL).group(1)
        assert nudge and re.search(r"run the check again with hint=2; for the values in full, "
                                   r"verbose=True.\)$", messages[0])
        assert f"\nHint: {nudge}\nHint 2" in messages[1]
        steps = messages[-1].count("\nHint")
        assert steps >= 3
        assert messages[-1].count("(the answer)") == 1
        assert re.search(rf"\nHint {steps} \(the\s+answer\):\s", messages[-1])
        assert f"(For the answer, run the check again with hint={steps};" in " ".join(
            messages[steps - 2].split())
        assert "(the answer)" not in messages[steps - 2]


MAX_LINES = 15  # a failure's message, by default: about a screen
HAN = re.compile(r"[\u4e00-\u9fff]")  # a Chinese character


def columns(text: str) -> int:
    """The columns a line takes on screen: a Chinese character takes two."""
    return sum(2 if unicodedata.east_asian_width(c) in "WF" else 1 for c in text)



def attention_weights(scores, valid_lens, fill="package"):
    """The softmax of scores (..., T_q, T_k) over the keys each query may see, as a learner
    writes it: no mask when valid_lens is None; d2lh.masked_softmax (fill="package": a row with
    no valid key stays 0); or a number in masked places (fill="-inf": such a row becomes NaN;
    fill="-1e9": it becomes uniform)."""
    if valid_lens is None:
        return torch.softmax(scores, dim=-1)
    if fill == "package":
        return d2lh.masked_softmax(scores, valid_lens)
    allowed = d2lh.valid_lens_to_mask(valid_lens, scores.shape[-2], scores.shape[-1])
    return torch.softmax(scores.masked_fill(~allowed, float(fill)), dim=-1)
