"""Errors the command line reports as one line."""


class UserError(Exception):
    """A mistake the user can fix; printed as one line, exit code 2."""
