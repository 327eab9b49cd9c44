"""Engine-to-GPU compatibility (issue 5): engine metadata, the GPU catalog, rules and the repo check.

Kept import-light: `python -m kubectl_triton.compat.lookup` must run on a GPU machine with only the
standard library. Import the sub-modules you need (`engine`, `catalog`, `rules`, `repo_check`,
`inventory`).
"""
