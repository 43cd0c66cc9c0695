"""Helpers shared by tests of several packages: stand-in provider servers (providers_http), a real
``kloop serve`` (service), a Docker engine and test image (docker), headless Chromium (browser),
batch folders written by hand (batch), the hostile corpus's headers (hostile_corpus), leftover
processes (processes) and fixed prompt inputs (prompt_fixtures). Imported as ``tests.support.X``;
never run a file of this folder as a script (its names would shadow the packages they are named for)."""
