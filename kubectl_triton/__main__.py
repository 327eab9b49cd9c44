"""`python -m kubectl_triton` runs the plugin."""

from kubectl_triton.cli import main

main()
