"""``python -m infra.cli``: the ``gapless`` command, as the demo and tests start it."""

from infra.cli.main import main

main(prog_name="gapless")
