"""The operations console (``gapless console``): server-rendered pages over the same
modules as the CLI and the APIs, with the APIs' tokens and roles, an audit of every
action, and a dry run before any bulk action. See ``docs/console.md``."""
