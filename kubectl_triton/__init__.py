"""kubectl-triton: GitOps toolkit for NVIDIA Triton Inference Server on Kubernetes."""

__version__ = "0.1.0"
