"""The gradlab command line (import name ``gradlab_cli``); the Typer app is ``gradlab_cli.app.app``."""
