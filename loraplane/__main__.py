"""`python -m loraplane`: the same command line as `loraplane`."""

from loraplane.cli import app

app(prog_name="loraplane")
