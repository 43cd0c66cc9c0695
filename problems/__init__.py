"""The problem suite: one folder per problem, a registry, oracle solutions."""

from problems.registry import UnknownProblem, all_problems, get_problem, problem_names
from problems.spec import Cost, Problem, ProblemSpec

__all__ = ["Cost", "Problem", "ProblemSpec", "UnknownProblem", "all_problems", "get_problem", "problem_names"]
