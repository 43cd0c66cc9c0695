"""The problem suite: one folder per problem, a registry, oracle solutions."""

from problems.registry import UnknownProblem, all_problems, find_problem, get_problem, load_ref, problem_names
from problems.spec import Cost, Problem, ProblemSpec

__all__ = ["Cost", "Problem", "ProblemSpec", "UnknownProblem", "all_problems", "find_problem", "get_problem", "load_ref",
           "problem_names"]
