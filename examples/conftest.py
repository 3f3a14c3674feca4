"""The fp8audit pytest plugin for these examples, also in a checkout where fp8audit is not
installed (its entry point then does not exist): `pytest --fp8audit examples/` works either way."""

pytest_plugins = ["fp8audit.pytest_plugin"]
