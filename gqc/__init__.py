"""gqc: the console's command line, a runai-style client of the REST API (docs/cli.md).

It talks to the console only over HTTP, with the token `gqc login` stored, so it runs on any
machine that can reach the console and imports nothing of the server's code.
"""

# The package's one version (pyproject.toml reads it); the node agent reports it at registration.
__version__ = "0.1.0"
