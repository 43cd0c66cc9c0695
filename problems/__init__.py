"""The problem suite: one folder per problem, oracle solutions, and the modules around them, by role:

- :mod:`problems.contract`: what a problem is (``Problem``, ``ProblemSpec``, ``Cost``);
- :mod:`problems.authoring`: helpers for a problem's ``make_inputs``;
- :mod:`problems.loader`: a suite problem loaded from its folder;
- :mod:`problems.registry`: problems found by name (suite folders, ``pkb:`` prefixes);
- :mod:`problems.pkb`: ParallelKernelBench problems from a user's checkout.
"""

from problems.contract import Cost, Problem, ProblemSpec, UnknownProblem
from problems.registry import all_problems, find_problem, get_problem, load_ref, problem_names

__all__ = ["Cost", "Problem", "ProblemSpec", "UnknownProblem", "all_problems", "find_problem", "get_problem", "load_ref",
           "problem_names"]
