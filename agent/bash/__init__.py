"""Bash mode: the model works at a shell inside the sandbox (agent.bash.agent), kloop's commands
(check, bench, profile, submit) answered outside it (agent.bash.commands), the submission judged
by the full harness; the trajectory in mini-swe-agent's 1.1 format. agent.bash.mini puts
mini-swe-agent's own agents in the same shell.

Entry points: ``run_episode`` (agent.bash.episode), ``BashSettings`` (agent.bash.config).
"""
