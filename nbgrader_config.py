"""nbgrader's configuration for this course (nbgrader 0.9). nbgrader reads it when run from this
folder; the instructor's guide, exercises/README.md, explains the grading steps.

It needs nbgrader and this repository's packages (d2lhelpers, exercise_authoring) installed in
one environment, the environment whose Python runs the grading kernel ("python3").
"""

from nbgrader.converters import Autograde
from nbgrader.preprocessors import Execute

from exercise_authoring import ANSWER_STUB, STUB
from exercise_authoring.grading import RequireSetupCell

c = get_config()  # noqa: F821 (defined by the configuration loader)

# Seconds a cell may run before nbgrader interrupts it (its default is 30). The longest cells,
# training in notebooks 06 and 07, take up to about 4 minutes on a 2-core CPU; 10 minutes leaves
# room for a busier machine or a slower solution, and bounds what an endless loop costs.
c.Execute.timeout = 600

# The stubs of our student copies, so that nbgrader's release notebooks equal them: a solution in
# code becomes "# YOUR CODE HERE" and a line raising d2lhelpers.exercises.NotWrittenYet (a
# NotImplementedError that Jupyter shows in two lines naming the function to write), a model
# answer "YOUR ANSWER HERE". nbgrader's solution markers stay its default, "BEGIN SOLUTION" and
# "END SOLUTION" anywhere in a line: "### ..." in code, "<!-- ... -->" in markdown.
c.ClearSolutions.code_stub = {"python": STUB}
c.ClearSolutions.text_stub = ANSWER_STUB

# After executing a submission, stop with an error if its setup cell failed (d2lhelpers missing
# from the grading kernel) instead of recording 0 for every check.
preprocessors = Autograde.class_traits()["autograde_preprocessors"].default()
after_execute = preprocessors.index(Execute) + 1
c.Autograde.autograde_preprocessors = [*preprocessors[:after_execute], RequireSetupCell,
                                       *preprocessors[after_execute:]]
