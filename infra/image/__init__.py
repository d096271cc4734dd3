"""The container image: building it with podman from Debian's packages (``build``),
and running ``gapless`` commands as containers of it (``containers``)."""
