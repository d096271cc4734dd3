"""The container image: ``gapless image build``."""

from __future__ import annotations

import click

from infra.cli.output import echo, guarded


@click.group()
def image() -> None:
    """The one container image of every gapless process (podman, from Debian's packages)."""


@image.command("build")
@click.option("--rebuild-base", is_flag=True, help="Build the Debian base again too.")
def build(rebuild_base: bool) -> None:
    """Install podman & co if missing, build the base unless cached, then the image."""
    from infra.image.build import build as build_image
    from infra.local.layout import current_layout

    name = guarded(lambda: build_image(current_layout(), echo, rebuild_base=rebuild_base))
    click.echo(name)
