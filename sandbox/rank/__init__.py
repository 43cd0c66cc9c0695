"""What runs inside a rank process (candidate or reference): the wire format, the device and
timing primitives, the command loop and the zygote that forks ranks. Imports only the standard
library, torch and kloop_runtime: a candidate's rank never holds the judge, the problems or the
controller."""
