"""Control flow of the agent loop, by small exceptions that carry messages (as in
mini-swe-agent): non-terminating ones become feedback to the model, terminating ones end the
run with their exit status."""


class AgentControl(Exception):
    def __init__(self, message: str = ""):
        super().__init__(message)
        self.message = message


class NonTerminating(AgentControl):
    """The model gets ``message`` as feedback and the run goes on."""


class FormatError(NonTerminating):
    """The answer holds no usable solution."""


class Truncated(NonTerminating):
    """The answer was cut off at the output limit."""


class Terminating(AgentControl):
    """The run ends; the class name is the exit status."""

    @property
    def exit_status(self) -> str:
        return type(self).__name__


class Submitted(Terminating):
    """The target speedup was reached."""


class LimitsExceeded(Terminating):
    """A budget (steps, tokens, cost, wall time) is spent."""


class ProviderFailed(Terminating):
    """The model provider kept failing."""
