"""The binary's entry point: what the `switchboard-local` console script runs.

PyInstaller starts a script, not a package: switchboard_local/__main__.py
imports relatively, so it cannot be that script.
"""

from switchboard_local.cli.main import main

main(prog_name="switchboard-local")
