"""`python -m kubectl_triton` runs the plugin."""

from .cli import main

main()
